"""In-place, validated refit of MXFP8 routed-expert weights (RL weight sync).

refit: validate the batch (``validate.py``) -> ``quantize_`` / ``copy_`` into the existing canonical storage
-> write hooks repack derived kernel stacks in place -> ``refresh_cache()`` (``apply.py``).
"""

from .apply import RefitReport, refit_experts
from .validate import RefitPlan, validate_refit

__all__ = ["RefitPlan", "RefitReport", "refit_experts", "validate_refit"]
