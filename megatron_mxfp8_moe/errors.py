"""Exception types. Each message names the offending argument or the missing requirement."""


class MXFP8Error(Exception):
    """Base class for every error raised by megatron_mxfp8_moe."""


class MXFP8InputError(MXFP8Error, ValueError):
    """An argument has the wrong shape, dtype, device, layout or a non-finite value.

    Raised before any byte of a destination is written.
    """


class BackendUnavailableError(MXFP8Error, RuntimeError):
    """A backend cannot run here; the message names the requirement (package, version, GPU)."""


class ReleasedWeightError(MXFP8Error, RuntimeError):
    """A canonical weight whose storage was released after its kernel stack took it over was read."""


class RefitError(MXFP8Error, ValueError):
    """A refit batch was rejected; the message names the offending entry.

    ``applied_modules`` names the experts modules already written before the error (streams only; a
    mapping batch is validated whole, so it is empty there).
    """

    applied_modules: tuple = ()
