"""DLPack capsules to torch tensors, and what this torch can import."""

import torch
import torch.utils.dlpack

from gpufeed import _gpufeed

# torch's capsule importer; torch.utils.dlpack.from_dlpack adds protocol checks per call.
from_capsule = getattr(torch._C, "_from_dlpack", torch.utils.dlpack.from_dlpack)

# DLPack before 0.8 (torch 1.13) has no bool code: gpufeed exports bool as uint8 and the
# tensor is viewed back as bool, in place.
_VIEW_AS = {"bool": torch.bool}


def check_schema(schema):
    """Raises Unsupported for a field whose dtype this torch has no dtype for."""
    for name, dtype, _ in schema:
        if dtype in ("uint16", "uint32", "uint64") and not hasattr(torch, dtype):
            raise _gpufeed.Unsupported(
                f"field '{name}' is {dtype}, which torch {torch.__version__} has no dtype "
                f"for; store it as int32/int64 (or read it with a newer torch)")


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
