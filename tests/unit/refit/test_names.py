"""names.py: Megatron expert-weight names, parsing and formatting."""

import ast
import pathlib

import pytest

from megatron_mxfp8_moe.names import ExpertWeightName, join_name, local_weight_name, parse_expert_weight_name


@pytest.mark.parametrize(
    "name, module_path, linear, index",
    [
        ("decoder.layers.0.mlp.experts.linear_fc1.weight3", "decoder.layers.0.mlp.experts", "fc1", 3),
        ("decoder.layers.17.mlp.experts.linear_fc2.weight0", "decoder.layers.17.mlp.experts", "fc2", 0),
        ("module.decoder.layers.2.mlp.experts.linear_fc2.weight127", "module.decoder.layers.2.mlp.experts", "fc2", 127),
        ("linear_fc1.weight5", "", "fc1", 5),
        ("experts.linear_fc2.weight10", "experts", "fc2", 10),
    ],
)
def test_parse_expert_weight_names(name, module_path, linear, index):
    parsed = parse_expert_weight_name(name)
    assert parsed == ExpertWeightName(module_path, linear, index)
    assert parsed.full_name == name
    assert parsed.local_name == f"linear_{linear}.weight{index}"


@pytest.mark.parametrize(
    "name",
    [
        "decoder.layers.0.self_attention.linear_qkv.weight",
        "decoder.layers.0.mlp.experts.linear_fc1.weight",  # TE grouped name without an index
        "decoder.layers.0.mlp.experts.linear_fc3.weight0",
        "decoder.layers.0.mlp.experts.linear_fc1.weight03",  # leading zero
        "decoder.layers.0.mlp.experts.linear_fc1.weight-1",
        "decoder.layers.0.mlp.experts.linear_fc1.bias0",
        "decoder.layers.0.mlp.experts.linear_fc1.weight0._extra_state",
        "decoder.layers.0.mlp.experts.xlinear_fc1.weight0",
        ".linear_fc1.weight0",
        "linear_fc1.weight1a",
        "",
    ],
)
def test_non_expert_names_parse_to_none(name):
    assert parse_expert_weight_name(name) is None


def test_parse_rejects_non_str():
    with pytest.raises(TypeError, match="str"):
        parse_expert_weight_name(3)


def test_local_weight_name_and_join():
    assert local_weight_name("fc2", 7) == "linear_fc2.weight7"
    assert join_name("decoder.layers.1.mlp.experts", "linear_fc2.weight7") == (
        "decoder.layers.1.mlp.experts.linear_fc2.weight7"
    )
    assert join_name("", "linear_fc2.weight7") == "linear_fc2.weight7"
    for linear, index in (("fc3", 0), ("fc1", -1), ("fc1", True), ("fc1", 1.0)):
        with pytest.raises(ValueError):
            local_weight_name(linear, index)


def test_round_trip_over_many_indices():
    for index in (0, 1, 9, 10, 99, 100, 1023):
        for linear in ("fc1", "fc2"):
            name = join_name("decoder.layers.3.mlp.experts", local_weight_name(linear, index))
            parsed = parse_expert_weight_name(name)
            assert (parsed.linear, parsed.local_index, parsed.full_name) == (linear, index, name)


def test_names_module_imports_only_the_standard_library():
    import megatron_mxfp8_moe.names as names

    tree = ast.parse(pathlib.Path(names.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "names.py must not import from the package"
            imported.add(node.module.split(".")[0])
    assert imported <= {"__future__", "re", "dataclasses", "typing"}, imported
