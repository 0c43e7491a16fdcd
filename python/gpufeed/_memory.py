"""The memory a process keeps for its next loaders, and gpufeed.release_memory() to free it."""

from gpufeed import _gpufeed


def release_memory():
    """Frees what the process keeps for its next loaders, and returns how much.

    A closed loader's batch buffers go back to a process-wide pool, still faulted in, and on a
    GPU its pinned staging buffers stay pinned (the pool then holds the GPU's primary context),
    so the next loader of the process (the next trial, evaluation or validation pass) starts
    without faulting them in or pinning them again. The pools keep at most
    GPUFEED_HOST_POOL_BYTES (default 1/8 of RAM, at most 8 GiB) and GPUFEED_PINNED_POOL_BYTES
    (default 1/16 of RAM, at most 4 GiB). Call this when the program is done with loaders for a
    while and wants that memory back; loaders still open keep theirs.

    Returns {"host_bytes": bytes freed, "pinned_bytes": bytes unpinned}.
    """
    return _gpufeed.release_memory()
