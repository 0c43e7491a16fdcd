"""DLPack capsules to torch tensors, and what this torch can import."""

import torch
import torch.utils.dlpack

from gpufeed import _gpufeed

# torch's capsule importer; torch.utils.dlpack.from_dlpack adds protocol checks per call.
from_capsule = getattr(torch._C, "_from_dlpack", torch.utils.dlpack.from_dlpack)

# DLPack before 0.8 (torch 1.13) has no bool code: gpufeed exports bool as uint8 and the
# tensor is viewed back as bool, in place.
_VIEW_AS = {"bool": torch.bool}


# The dtype= a field of an unsigned dtype torch lacks is read as: every uint16 and uint32 fits
# the first; a uint64 above int64's range is refused as it is read, naming the sample.
CAST_FOR_TORCH = {"uint16": "int32", "uint32": "int64", "uint64": "int64"}


def check_schema(schema, cast_by_transform=False):
    """Raises Unsupported for a field whose dtype this torch has no dtype for, naming the
    option that reads it: dtype=, or (`cast_by_transform`: rows of a variable-length field,
    which dtype= does not reach) a cast transform."""
    for name, dtype, _ in schema:
        if dtype in CAST_FOR_TORCH and not hasattr(torch, dtype):
            cast = CAST_FOR_TORCH[dtype]
            fits = ("values above int64's range are refused, naming the sample"
                    if dtype == "uint64" else f"every {dtype} value fits")
            option = (f"transforms=['cast:{name}:{cast}']" if cast_by_transform
                      else f"dtype={{'{name}': '{cast}'}}")
            raise _gpufeed.Unsupported(
                f"field '{name}' is {dtype}, which torch {torch.__version__} has no dtype "
                f"for: pass {option} to gpufeed.Loader to read it as "
                f"{cast} ({fits}; 'int64' and 'float32' are accepted too)")


def field_views(schema):
    """[(position, torch dtype)] of the fields whose tensors need a dtype view."""
    return [(i, _VIEW_AS[dtype]) for i, (_, dtype, _) in enumerate(schema) if dtype in _VIEW_AS]


def consumer_stream(device_type, device_index):
    """The DLPack `stream` argument for a batch on `device`: torch's current CUDA stream
    (None for the legacy default stream), None for host batches."""
    if device_type != "cuda":
        return None
    handle = torch.cuda.current_stream(device_index).cuda_stream
    return handle or None
