"""torch.distributed plumbing: one listing of remote data per job, every rank's loader figures
side by side, and states gathered from several ranks.

Each function works without a process group too (then it concerns this process alone), so a
script runs the same under torchrun and on its own. The ones that talk to the other ranks are
collectives: every rank must call them, in the same order.
"""

from gpufeed import _gpufeed
from gpufeed._options import is_remote

# URIs whose listing this process already took part in: opening a data set may pass through
# open() more than once (stacked fields), and each rank does so the same number of times.
_listed = set()


def process_group():
    """torch.distributed when a process group is up, else None."""
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    if dist.is_available() and dist.is_initialized():
        return dist
    return None


def manifest_for(uri):
    """One listing of remote data for the whole job. With a process group and a remote `uri`
    (s3://, http://, https://), rank 0 lists it (its objects: uri, size, etag) and broadcasts
    the list; every other rank registers it instead of listing, so a job of N ranks sends one
    listing to the store, and every rank reads the same objects (the same ETags). Without a
    process group, or for a local path, nothing: each process lists for itself when it opens.

    Returns the list the ranks share, or None where nothing was shared. A listing that fails
    on rank 0 raises there and, with its message, on every other rank (instead of leaving them
    waiting in the broadcast)."""
    if not isinstance(uri, str) or not is_remote(uri) or uri in _listed:
        return None
    dist = process_group()
    # The same build on every rank: all take part in the broadcast, or none does.
    if dist is None or not (hasattr(_gpufeed, "list_remote")
                            and hasattr(_gpufeed, "add_remote_manifest")):
        return None
    rank = dist.get_rank()
    payload = [None]
    failure = None
    if rank == 0:
        try:
            payload[0] = ("objects", [tuple(o) for o in _gpufeed.list_remote(uri)])
        except Exception as e:  # sent to the other ranks, then raised here
            failure = e
            payload[0] = ("error", type(e).__name__, str(e))
    dist.broadcast_object_list(payload, src=0)
    _listed.add(uri)
    if payload[0][0] == "error":
        if failure is not None:
            raise failure
        kind = getattr(_gpufeed, payload[0][1], None)
        if not (isinstance(kind, type) and issubclass(kind, Exception)):
            kind = _gpufeed.Error
        raise kind(f"rank 0 could not list {uri}: {payload[0][2]}")
    objects = payload[0][1]
    if rank != 0:
        _gpufeed.add_remote_manifest(uri, objects)
    return objects


def manifests_for(source):
    """manifest_for() for each path a Loader's `source` names (a path or a list of them)."""
    if isinstance(source, (list, tuple)):
        for item in source:
            manifest_for(item)
    else:
        manifest_for(source)


# Where the loop's wait was spent (the doctor's wait_path), in words.
_WAIT_WORDS = {
    "queued": "no free worker (every worker busy with earlier batches)",
    "buffer": "a free batch buffer",
    "read": "read",
    "transform": "transforms",
    "copy": "the copy to the device",
    "handoff": "the wake-up of the training loop",
}


def rank_summary(loader, diagnosis, rank):
    """This rank's figures for the cross-rank report."""
    stats = loader.stats()
    wall = stats.get("wall_s") or 0.0
    path = diagnosis.get("wait_path") or {}
    top = max(path, key=path.get) if path else ""
    stage = diagnosis.get("stage") or top
    return {
        "rank": rank,
        "wait_fraction": float(stats.get("consumer_wait_fraction") or 0.0),
        "samples_per_s": stats["samples"] / wall if wall > 0 else 0.0,
        "batches": int(stats.get("batches", 0)),
        "verdict": diagnosis.get("verdict", ""),
        "stage": stage,
        "stage_words": _WAIT_WORDS.get(stage, stage),
        "headline": diagnosis.get("headline", ""),
    }


def slowest(summaries):
    """The rank holding the others back: the one that waited most for data (under DDP the
    others wait for it in their collectives), the lowest read rate on a tie."""
    return max(summaries, key=lambda s: (s["wait_fraction"], -s["samples_per_s"], -s["rank"]))


def ranks_text(summaries):
    worst = slowest(summaries)
    lines = [f"Ranks: {len(summaries)}; slowest: rank {worst['rank']} waited "
             f"{100 * worst['wait_fraction']:.0f} % for data"
             + (f", on {worst['stage_words']}" if worst["stage"] else "")
             + (f" ({worst['verdict']})" if worst["verdict"] else "")]
    for s in summaries:
        lines.append(f"  rank {s['rank']}: waited {100 * s['wait_fraction']:.0f} %, "
                     f"{s['samples_per_s']:.0f} samples/s, {s['verdict'] or '-'}"
                     + (f", {s['stage']}" if s["stage"] else ""))
    return "\n".join(lines)


def gather_report(loader, diagnosis):
    """Every rank's summary (all_gather_object with a process group; this rank alone without
    one), the slowest of them and the text naming it, added to this rank's `diagnosis`."""
    dist = process_group()
    rank = dist.get_rank() if dist is not None else 0
    mine = rank_summary(loader, diagnosis, rank)
    if dist is None:
        summaries = [mine]
    else:
        summaries = [None] * dist.get_world_size()
        dist.all_gather_object(summaries, mine)
    result = dict(diagnosis)
    result["ranks"] = summaries
    result["slowest"] = slowest(summaries)
    result["ranks_text"] = ranks_text(summaries)
    result["text"] = diagnosis["text"] + "\n" + result["ranks_text"]
    return result, rank


def agreed_state(states, rank, world_size):
    """One state from the states of several ranks (a list, e.g. all_gather_object of each
    rank's state_dict()): they must be at the same place of the same epoch's global order.
    The state of this loader's own rank and world size where there is one (it resumes exactly
    where that rank stood), else the first."""
    states = [dict(s) for s in states]
    if not states:
        raise _gpufeed.InvalidArgument("load_state_dict got an empty list of states")
    where = {(s.get("epoch"), s.get("global_consumed")) for s in states}
    if len(where) > 1:
        listed = ", ".join(f"rank {s.get('rank')}: epoch {s.get('epoch')} at "
                           f"{s.get('global_consumed')}" for s in states)
        raise _gpufeed.InvalidArgument(
            "cannot restore loader state: the ranks' states are at different places of the "
            f"epoch's global order ({listed}); save them with every rank at the same step")
    own = [s for s in states if s.get("rank") == rank and s.get("world_size") == world_size]
    return (own or states)[0]
