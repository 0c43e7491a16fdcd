"""Grouped data: the group table of a Loader(groups=gpufeed.Groups(group=... / offsets=...)),
and GroupReducer, which reduces per-row model outputs to per-group results on the device."""

import os
import warnings
from collections.abc import Mapping

import numpy as np
import torch

from gpufeed import _gpufeed

_HOWS = ("mean", "max", "vote", "sum")


def _integers(value, what):
    array = np.asarray(value)
    if array.ndim != 1 or array.dtype.kind not in "iu":
        raise _gpufeed.Unsupported(
            f"{what} must be a 1-D integer array, got {array.dtype} of shape {array.shape}")
    if array.dtype.kind == "u" and array.size and array.max() > np.iinfo(np.int64).max:
        raise _gpufeed.CorruptData(f"{what} holds values past the int64 range")
    return np.ascontiguousarray(array, dtype=np.int64)


def _field_tuple(name, value):
    array = np.ascontiguousarray(np.asarray(value))
    if array.ndim == 0 or array.dtype.kind not in "biuf":
        raise _gpufeed.Unsupported(
            f"per-group field '{name}' must be a numeric array of one row per group, got "
            f"{array.dtype} of shape {array.shape}")
    return array, (str(name), array.dtype.name, list(array.shape[1:]),
                   array.__array_interface__["data"][0], array.shape[0])


def group_table(source, raw, group, group_offsets, group_fields, rows):
    """The _GroupTable a Loader packs: from the dict of arrays or the file the loader reads
    (`raw`, what the user passed as the source), or from arrays given directly."""
    if (group is None) == (group_offsets is None):
        raise _gpufeed.InvalidArgument(
            "gpufeed.Groups takes exactly one of group= (a per-row integer field) and "
            "offsets= (F+1 row offsets)")
    fields = list(group_fields or [])
    if isinstance(group_fields, str):
        fields = [group_fields]
    named = group if group is not None else group_offsets
    by_name = isinstance(named, str) and all(isinstance(f, str) for f in fields)
    if by_name and isinstance(raw, (str, bytes, os.PathLike)):
        return _gpufeed.read_groups(os.fsdecode(raw), group or "", group_offsets or "",
                                    fields, rows)
    if by_name and isinstance(raw, (list, tuple)):
        if len(raw) != 1:
            raise _gpufeed.InvalidArgument(
                "groups are read from one file: with several HDF5 files pass the offsets or "
                "ids (and per-group fields) as arrays")
        return _gpufeed.read_groups(os.fsdecode(raw[0]), group or "", group_offsets or "",
                                    fields, rows)

    def lookup(value, what):
        if isinstance(value, str):
            if not isinstance(raw, Mapping) or value not in raw:
                raise _gpufeed.NotFound(
                    f"{what} '{value}' is not an entry of the source's dict; pass the array "
                    f"itself")
            return value, raw[value]
        return what, value

    keep = []
    specs = []
    for f in fields:
        name, value = lookup(f, "per-group field")
        array, spec = _field_tuple(name, value)
        keep.append(array)
        specs.append(spec)
    if group_offsets is not None:
        name, value = lookup(group_offsets, "group_offsets")
        return _gpufeed.group_table("offsets", _integers(value, f"group offsets '{name}'"), rows,
                                    f"'{name}'", specs)
    name, value = lookup(group, "group")
    groups = specs[0][4] if specs else None
    return _gpufeed.group_table("ids", _integers(value, f"group ids '{name}'"), rows,
                                f"'{name}'", specs, groups)


def excluded_names(group, group_offsets, group_fields):
    """The dict entries that describe groups, not rows: left out of a dict source's fields."""
    names = {n for n in (group, group_offsets) if isinstance(n, str)}
    if isinstance(group_fields, str):
        group_fields = [group_fields]
    names.update(f for f in (group_fields or []) if isinstance(f, str))
    return names


def group_fields(table):
    """{name: CPU tensor [F, ...]} of a table's per-group fields."""
    out = {}
    for name, dtype, shape, data in table.fields():
        array = np.frombuffer(data, dtype=np.dtype(dtype)).reshape((table.num_groups,) + shape)
        out[name] = torch.from_numpy(array.copy())
    return out


class GroupReducer:
    """Reduces per-row model outputs to one result per group, on the device.

    reducer = gpufeed.GroupReducer(loader.num_groups, how="vote", device="cuda")
    for batch in loader:
        reducer.update(model(batch["mel"]), batch)      # or reducer.update(out, batch["group"])
    per_file = reducer.result()                          # [num_groups, ...], in group order

    how:
      "sum":  the sum of the rows' outputs ([rows, ...] -> [num_groups, ...]),
      "mean": their mean (NaN for a group that received no row),
      "max":  their elementwise maximum (-inf, or the dtype's minimum, for no row),
      "vote": the majority class: outputs are logits/scores [rows, C] (the row's class is
              their argmax) or class indices [rows] (then num_classes is required); the
              result is int64 [num_groups], ties going to the lowest class, -1 for no row.
    Everything stays on `device` (index_add_ / scatter_reduce_; no per-group Python loop and
    no host synchronisation per batch); groups split across batches accumulate like any
    other. counts() gives the rows each group received.

    Two-level voting (mean over short windows, then majority over windows per file): reduce
    with how="mean" keyed by window ids, then feed result() to a how="vote" reducer keyed
    by each window's file: GroupReducer(files, "vote").update(windows.result(), file_of_window).
    """

    def __init__(self, num_groups, how="mean", device=None, num_classes=None,
                 dtype=torch.float32):
        if how not in _HOWS:
            raise _gpufeed.InvalidArgument(f"how must be one of {_HOWS}, got {how!r}")
        num_groups = int(num_groups)
        if num_groups < 0:
            raise _gpufeed.InvalidArgument(f"num_groups must be >= 0, got {num_groups}")
        self.num_groups = num_groups
        self.how = how
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.num_classes = None if num_classes is None else int(num_classes)
        self.dtype = dtype
        self._acc = None
        self._bad = None  # vote: a device flag, set when a class index was out of range
        self._counts = torch.zeros(num_groups, dtype=torch.int64, device=self.device)
        self._ones_buffer = None

    def _group_ids(self, group):
        if isinstance(group, Mapping):
            group = group["group"]
        ids = torch.as_tensor(group)
        if ids.device != self.device:
            ids = ids.to(self.device, non_blocking=True)
        return ids.long()

    def update(self, outputs, group):
        """Adds the rows of one batch: `outputs` [rows, ...] (a tensor on any device) and
        their group ids (a batch from a grouped loader, its batch["group"], or any integer
        tensor of the rows' groups)."""
        ids = self._group_ids(group)
        outputs = torch.as_tensor(outputs)
        if outputs.device != self.device:
            outputs = outputs.to(self.device, non_blocking=True)
        if outputs.shape[:1] != ids.shape:
            raise _gpufeed.InvalidArgument(
                f"outputs have {tuple(outputs.shape)[:1]} rows, the group ids "
                f"{tuple(ids.shape)}: one id per row")
        outputs = outputs.detach()
        self._counts.index_add_(0, ids, self._ones(ids))
        if self.how == "vote":
            self._vote(outputs, ids)
        elif self.how in ("sum", "mean"):
            if self._acc is None:
                acc_dtype = self.dtype if outputs.is_floating_point() or self.how == "mean" \
                    else torch.int64
                self._acc = torch.zeros((self.num_groups,) + tuple(outputs.shape[1:]),
                                        dtype=acc_dtype, device=self.device)
            self._acc.index_add_(0, ids, outputs.to(self._acc.dtype))
        else:  # max
            if self._acc is None:
                dtype = outputs.dtype
                low = -float("inf") if dtype.is_floating_point else torch.iinfo(dtype).min
                self._acc = torch.full((self.num_groups,) + tuple(outputs.shape[1:]), low,
                                       dtype=dtype, device=self.device)
            index = ids.view((-1,) + (1,) * (outputs.dim() - 1)).expand_as(outputs)
            with warnings.catch_warnings():
                # torch 1.13 marks scatter_reduce as beta; "amax" has been there since 1.12.
                warnings.simplefilter("ignore", UserWarning)
                self._acc.scatter_reduce_(0, index, outputs.to(self._acc.dtype), "amax",
                                          include_self=True)

    def _vote(self, outputs, ids):
        if outputs.is_floating_point():
            if outputs.dim() != 2:
                raise _gpufeed.InvalidArgument(
                    f"vote takes scores [rows, classes] or class indices [rows], got "
                    f"{tuple(outputs.shape)}")
            classes = outputs.shape[1]
            if self.num_classes is not None and self.num_classes != classes:
                raise _gpufeed.InvalidArgument(
                    f"outputs have {classes} classes, the reducer {self.num_classes}")
            self.num_classes = classes
            predicted = outputs.argmax(dim=1)
        else:
            if self.num_classes is None:
                raise _gpufeed.InvalidArgument(
                    "vote over class indices needs num_classes (GroupReducer(..., "
                    "num_classes=C))")
            predicted = outputs.long().view(-1)
        if self._acc is None:
            self._acc = torch.zeros(self.num_groups * self.num_classes, dtype=torch.int64,
                                    device=self.device)
        # One histogram of (group, class) pairs: a flat index_add_ per batch. A given class
        # index outside [0, num_classes) would land in another group's histogram: clamp so
        # it cannot, and reject it when the result is read (no host sync here). An argmax
        # over num_classes scores is always in range.
        if not outputs.is_floating_point():
            bad = ((predicted < 0) | (predicted >= self.num_classes)).any()
            self._bad = bad if self._bad is None else (self._bad | bad)
            predicted = predicted.clamp(0, self.num_classes - 1)
        flat = ids * self.num_classes
        flat += predicted
        self._acc.index_add_(0, flat, self._ones(flat))

    def _ones(self, like):
        """int64 ones of `like`'s length, kept between batches."""
        if self._ones_buffer is None or len(self._ones_buffer) < len(like):
            self._ones_buffer = torch.ones(max(len(like), 1), dtype=torch.int64,
                                           device=self.device)
        return self._ones_buffer[:len(like)]

    def counts(self):
        """Rows each group received, int64 [num_groups] on the device."""
        return self._counts

    def result(self):
        """Per-group results in group order, [num_groups, ...] on the device."""
        if self.how == "vote":
            if self._acc is None:
                return torch.full((self.num_groups,), -1, dtype=torch.int64, device=self.device)
            if self._bad is not None and bool(self._bad):
                raise _gpufeed.InvalidArgument(
                    f"vote: a class index outside [0, {self.num_classes}) was given")
            votes = self._acc.view(self.num_groups, self.num_classes)
            winner = votes.argmax(dim=1)  # the first of equal maxima: the lowest class
            return torch.where(self._counts > 0, winner, torch.full_like(winner, -1))
        if self._acc is None:
            raise _gpufeed.InvalidArgument("no outputs were added to the reducer yet")
        if self.how == "mean":
            shape = (-1,) + (1,) * (self._acc.dim() - 1)
            return self._acc / self._counts.view(shape).to(self._acc.dtype)
        return self._acc

    def votes(self):
        """how="vote": the per-class counts, int64 [num_groups, num_classes]."""
        if self.how != "vote" or self._acc is None:
            raise _gpufeed.InvalidArgument("votes() is for a vote reducer that received rows")
        return self._acc.view(self.num_groups, self.num_classes)

    def reset(self):
        """Forgets every row added (for the next evaluation)."""
        self._acc = None
        self._bad = None
        self._counts.zero_()
