"""What the training loop gets: gpufeed.Batch, one batch as a dict of tensors, and the
iterator that hands out the rest of an epoch's batches."""

from collections import OrderedDict

import torch

from gpufeed import _gpufeed


class Batch(dict):
    """One batch: field name -> torch tensor [batch_size, ...], plus where it came from.

    The tensors share the loader's batch buffer (zero-copy); it goes back to the loader's
    pool only once every tensor of the batch is freed.

    It pickles (pickle, torch.save, copy.deepcopy) as an OrderedDict of its tensors: the dict
    type that torch.load's default weights_only=True (torch 2.6 and later) accepts.
    """

    __slots__ = ("_handle", "_group_fields")

    def __reduce__(self):
        return OrderedDict, (list(self.items()),)

    @property
    def indices(self):
        """The sample index of each row, a torch.int64 tensor (a copy)."""
        return torch.from_numpy(self._handle.indices())

    @property
    def epoch(self):
        return self._handle.epoch

    @property
    def groups(self):
        """Packed groups (Loader(groups=gpufeed.Groups(...))): the group parts in this batch,
        in row order, as a dict of CPU tensors: "id" (int64), "begin" / "end" (its rows in the
        batch), "offset" (the part's first row within its group: > 0 for a later part of a
        group longer than a batch), "complete" (bool: the part holds the group's last row),
        and each per-group field gathered for those ids. batch["group"] is the per-row id on
        the batch's device."""
        fields = getattr(self, "_group_fields", None)
        if fields is None:
            raise _gpufeed.InvalidArgument("this batch is not from a grouped loader")
        ids, begin, end, offset, complete = (torch.from_numpy(a) for a in
                                             _gpufeed.batch_groups(self._handle))
        out = {"id": ids, "begin": begin, "end": end, "offset": offset, "complete": complete}
        for name, values in fields.items():
            out[name] = values[ids]
        return out

    @property
    def index(self):
        """The batch number within its epoch."""
        return self._handle.index


class EpochIterator:
    """The rest of the current epoch. Unlike a generator it keeps no reference to the batch
    it handed out, so a batch the loop drops goes back to the pool at once."""

    __slots__ = ("_next", "_make", "_done")

    def __init__(self, impl, make):
        self._next, self._make, self._done = impl.next, make, False

    def __iter__(self):
        return self

    def __next__(self):
        if self._done:
            raise StopIteration
        if _profiling():
            # The wait as a range of torch's profiler; nothing is recorded when it is off.
            with torch.profiler.record_function("gpufeed.next"):
                handle = self._next()
        else:
            handle = self._next()  # waits with the GIL released
        if handle is None:
            self._done = True
            raise StopIteration
        return self._make(handle)


# Whether torch's profiler records now (one C call; a profiler started mid-epoch is seen at
# the next batch).
_profiling = torch._C._autograd._profiler_enabled
