"""Variable-length fields: ragged arrays in memory, and the two ways a loader batches them,
padded (the default) or packed (gpufeed.Pack)."""

import numpy as np
import torch

from gpufeed import _gpufeed

_TRUNCATION = ("right", "left")


class Ragged:
    """A variable-length field in memory: sample i is values[offsets[i]:offsets[i+1]].

    `values` holds the items end to end along axis 0 (`[N]` for token ids, `[N, 4]` for boxes);
    `offsets` holds samples + 1 integer positions in it, non-decreasing. Put it in the dict a
    Loader reads: {"tokens": gpufeed.ragged(values, offsets), "label": labels}."""

    def __init__(self, values, offsets):
        self.values = np.ascontiguousarray(np.asarray(values))
        if self.values.ndim == 0:
            raise _gpufeed.InvalidArgument("ragged values must have at least one dimension")
        if not self.values.dtype.isnative:
            self.values = self.values.astype(self.values.dtype.newbyteorder("="))
        if self.values.dtype.kind not in "biuf":
            raise _gpufeed.Unsupported(
                f"ragged values have dtype {self.values.dtype}, which gpufeed does not read")
        offsets = np.asarray(offsets)
        if offsets.ndim != 1 or offsets.size == 0 or offsets.dtype.kind not in "iu":
            raise _gpufeed.InvalidArgument(
                f"ragged offsets must be a 1-D integer array of samples + 1 positions, got "
                f"{offsets.dtype} of shape {offsets.shape}")
        if offsets.dtype.kind == "u" and offsets.max() > np.iinfo(np.int64).max:
            raise _gpufeed.CorruptData("ragged offsets hold values past the int64 range")
        self.offsets = np.ascontiguousarray(offsets, dtype=np.int64)

    def __len__(self):
        return self.offsets.size - 1

    def __repr__(self):
        item = "".join(f",{d}" for d in self.values.shape[1:])
        return f"gpufeed.ragged({self.values.dtype}[*{item}], {len(self)} samples)"


def ragged(values, offsets):
    """A variable-length field of values plus offsets (see Ragged)."""
    return Ragged(values, offsets)


class Pad:
    """Padded rows, the default: Loader(..., sequences=gpufeed.Pad(512)).

    One row per sample: batch["f"] is [B, max_length] (None: the longest sample of the data set,
    rounded up to pad_to_multiple_of), the sample's items first, then pad_value;
    batch["f_lengths"] (int64, [B]) holds the items kept. A longer sample is cut at its end
    (truncation="right") or its start ("left"); the items cut are counted in stats().
    `field`: the variable-length field to pad (None: the only one)."""

    def __init__(self, max_length=None, pad_value=0, pad_to_multiple_of=1, truncation="right",
                 field=None):
        self.max_length = None if max_length is None else int(max_length)
        if self.max_length is not None and self.max_length < 1:
            raise _gpufeed.InvalidArgument(f"Pad max_length must be >= 1, got {max_length!r}")
        self.pad_value = float(pad_value)
        self.pad_to_multiple_of = int(pad_to_multiple_of)
        if truncation not in _TRUNCATION:
            raise _gpufeed.InvalidArgument(
                f"truncation must be 'right' or 'left', got {truncation!r}")
        self.truncation = truncation
        self.field = field

    def __repr__(self):
        return (f"gpufeed.Pad({self.max_length}, pad_value={self.pad_value}, "
                f"pad_to_multiple_of={self.pad_to_multiple_of}, truncation={self.truncation!r})")


class Pack:
    """Sequence packing: Loader(..., sequences=gpufeed.Pack(4096)).

    Each row holds `length` items of the variable-length field, samples end to end; batch_size
    counts rows. A batch has `f` [B, length], `f_position_ids` [B, length] (int32, restarting
    at 0 where each sample's piece starts), `f_document_ids` [B, length] (int32, the pieces of
    a row numbered from 0, -1 on padding) and `f_lengths` [B] (int64, the items that are not
    padding). gpufeed.cu_seqlens(batch, "f") gives the boundaries varlen attention takes.

    split=True: the continuous stream of GPT-style pre-training; samples are cut at row ends,
    every item of the epoch appears exactly once and only the epoch's last row is padded. With
    the loader's shuffle, each epoch streams the samples in its own seeded order.
    split=False: whole samples only, packed first-fit-decreasing within windows of `window`
    samples, each row padded at its end (a sample longer than a row keeps its first items).
    `eos`: a value put after every sample. `pad_value`: what fills the padding.
    ids=False leaves out f_position_ids and f_document_ids (a model that attends across the
    samples of a row, as GPT pre-training with Megatron's defaults does): a third of the bytes.
    `field`: the variable-length field to pack (None: the only one)."""

    def __init__(self, length, split=True, eos=None, pad_value=0, window=1024, ids=True,
                 field=None):
        self.length = int(length)
        if self.length < 1:
            raise _gpufeed.InvalidArgument(f"Pack length must be >= 1, got {length!r}")
        self.split = bool(split)
        self.eos = None if eos is None else float(eos)
        self.pad_value = float(pad_value)
        self.window = int(window)
        self.ids = bool(ids)
        self.field = field

    def __repr__(self):
        return (f"gpufeed.Pack({self.length}, split={self.split}, eos={self.eos}, "
                f"pad_value={self.pad_value}, window={self.window}, ids={self.ids})")


def has_variable(schema):
    return any(shape and shape[0] == -1 for _, _, shape in schema)


def loader_options(schema, sequences):
    """The _LoaderOptions entries that say how the loader batches a variable-length field of
    a source of `schema` (`sequences`: None, a gpufeed.Pad, a max_length, or a gpufeed.Pack):
    pack_sequences or pad_sequences (the C++ assembly, OpenLoader, makes the rows), or none
    for fixed-size data without a `sequences`."""
    if sequences is None:
        if not has_variable(schema):
            return {}
        sequences = Pad()
    elif isinstance(sequences, int) and not isinstance(sequences, bool):
        sequences = Pad(sequences)
    if isinstance(sequences, Pack):
        return {"pack_sequences": {"field": sequences.field or "", "length": sequences.length,
                                   "split": sequences.split, "eos": sequences.eos,
                                   "pad_value": sequences.pad_value,
                                   "window": sequences.window, "ids": sequences.ids}}
    if isinstance(sequences, Pad):
        return {"pad_sequences": {"field": sequences.field or "",
                                  "max_length": sequences.max_length or 0,
                                  "pad_to_multiple_of": sequences.pad_to_multiple_of,
                                  "pad_value": sequences.pad_value,
                                  "truncate_left": sequences.truncation == "left"}}
    raise _gpufeed.InvalidArgument(
        f"sequences= takes gpufeed.Pad(max_length, ...), a max_length, or "
        f"gpufeed.Pack(length, ...); got {type(sequences).__name__}")


def cu_seqlens(batch, field):
    """The boundaries of the sequences in a packed batch over the flattened batch, int32
    [S + 1], as FlashAttention's *_varlen functions and flex attention take them: a boundary
    where each piece of a sample starts, and where each run of padding starts (padding is a
    sequence of its own, so the last boundary is B * length and batch[field].reshape(-1) feeds
    the kernel as is). Computed on the batch's device from f_position_ids and f_document_ids
    (on CUDA, its size waits for the batch)."""
    positions = batch[f"{field}_position_ids"]
    padding = batch[f"{field}_document_ids"] < 0
    after_padding = torch.zeros_like(padding)
    after_padding[:, 1:] = padding[:, :-1]
    starts = ((positions == 0) & ~padding) | (padding & ~after_padding)
    flat = torch.nonzero(starts.reshape(-1)).reshape(-1)
    end = torch.full((1,), starts.numel(), dtype=flat.dtype, device=flat.device)
    return torch.cat([flat, end]).to(torch.int32)
