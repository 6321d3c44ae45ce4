"""DREAM orchestration: layer 0 → script layer → solidify → combing → night drift → dream.

One run at a time, across processes and machines sharing the database, through a lease row. Every
run is a DreamRun row whose stats grow layer by layer, so an interrupted run shows how far it got;
the next run marks it interrupted. Runs are idempotent per day: the deterministic layers write
nothing when nothing changed, and an LLM layer that already completed today is skipped, so
derived memories are never written twice.
"""

import logging
from collections.abc import Callable
from datetime import date, datetime, time, timedelta

from django.utils import timezone

from dream import llm_layers
from dream.lease import (
    LeaseLost,
    holder_here,
    lease_acquire,
    lease_attach_run,
    lease_describe,
    lease_heartbeat,
    lease_kept,
    lease_release,
    lease_takeover_record,
)
from dream.models import LAYER_ORDER, LLM_LAYERS, DreamLayer, DreamRun, DreamRunStatus
from dream.scanner import chunks_find, scan_run
from dream.script_layer import script_layer_run
from memory.models import Actor
from memory.services.audit import audit_context
from memory.services.errors import InvalidInput
from memory.services.llm import LLMUnavailable, llm_config_load

logger = logging.getLogger("tideline.dream")


def dream_layers(layer: str) -> list[str]:
    """The layers a run of `layer` goes through, in order."""
    if layer not in DreamLayer.values:
        raise InvalidInput(f"layer must be one of {', '.join(DreamLayer.values)}", field="layer")
    return list(LAYER_ORDER) if layer == DreamLayer.ALL else [layer]


def dream_day_ended() -> date:
    """The DREAM day of the nightly run: the local day before the run's own date. The run fires
    after midnight (03:30 by default), when the day just begun holds almost nothing and the day
    that ended has not been combed or dreamt yet; each night taking the day before covers every
    day exactly once, whatever the hour of the schedule."""
    return timezone.localdate() - timedelta(days=1)


def _done_today(layer: str, day: date, *, exclude_run: int) -> DreamRun | None:
    """The latest earlier run on `day` in which `layer` completed."""
    for run in DreamRun.objects.filter(day=day).exclude(pk=exclude_run).order_by("-started_at"):
        if ((run.stats or {}).get("layers", {}).get(layer) or {}).get("status") == "ok":
            return run
    return None


def _day_end(day: date) -> datetime:
    """The local midnight that ends `day`."""
    return timezone.make_aware(datetime.combine(day + timedelta(days=1), time.min))


def dream_plan(*, layer: str = DreamLayer.ALL, since: datetime | None = None) -> dict:
    """What a run would do, computed without writing anything and without calling the LLM."""
    layers = dream_layers(layer)
    plan: dict = {"layers": layers, "dry_run": True}
    if DreamLayer.SCAN in layers or DreamLayer.SOLIDIFY in layers:
        report = scan_run(since=since)
        plan["scan"] = {key: report[key]["count"] for key in ("track_a", "track_b", "track_c")}
        plan["scan"]["track_d"] = report["track_d"]["count"]
    if DreamLayer.SCRIPT in layers:
        plan["script"] = script_layer_run(dry_run=True)
    llm_wanted = [name for name in layers if name in LLM_LAYERS]
    if llm_wanted:
        config = llm_config_load()
        plan["llm"] = {
            "configured": config is not None,
            "layers": llm_wanted,
            **(config.public() if config else {}),
        }
    return plan


def _run_layer(name: str, *, run: DreamRun, day: date, config, since, force: bool) -> dict:
    if name == DreamLayer.SCAN:
        report = scan_run(since=since)
        return {
            "status": "ok",
            "track_a": report["track_a"]["count"],
            "track_b": report["track_b"]["count"],
            "track_b_turns": report["track_b"]["turns"],
            "track_c": report["track_c"]["count"],
            "track_d": report["track_d"]["count"],
        }
    if name == DreamLayer.SCRIPT:
        return {"status": "ok", **script_layer_run()}
    if config is None:
        return {"status": "skipped", "reason": "no LLM configured (manage.py llm set)"}
    earlier = None if force else _done_today(name, day, exclude_run=run.pk)
    after = None
    if earlier is not None:
        done = {"status": "skipped", "reason": f"already done for {day} in run #{earlier.pk}"}
        # Solidify reads turns not yet solidified, whatever the day: the next run catches up.
        if name == DreamLayer.SOLIDIFY or earlier.started_at >= _day_end(day):
            return done
        # That run read the day while it was still going (`--day` today, or the last run of a
        # release that dreamt the day just begun): this one reads what was recorded after it
        # ended, not what it wrote itself (a memory an agent wrote while it ran is the price).
        after = earlier.finished_at or earlier.started_at
    if name == DreamLayer.SOLIDIFY:
        outcome = llm_layers.solidify_layer(chunks=chunks_find(since=since), day=day, config=config)
    elif name == DreamLayer.COMBING:
        outcome = llm_layers.combing_layer(day=day, config=config, after=after)
    elif name == DreamLayer.DRIFT:
        outcome = llm_layers.drift_layer(day=day, config=config, after=after)
    else:
        outcome = llm_layers.dream_layer(day=day, config=config, after=after)
    return outcome.as_stats()


def _run_skipped(*, layer: str, day: date, trigger: str) -> DreamRun:
    """A trigger that found the lease held leaves a visible record of why nothing ran."""
    reason = lease_describe()
    logger.warning("DREAM %s not started: %s", layer, reason)
    now = timezone.now()
    return DreamRun.objects.create(
        layer=layer,
        day=day,
        trigger=trigger[:16],
        status=DreamRunStatus.SKIPPED,
        started_at=now,
        finished_at=now,
        error=f"not started: {reason}",
    )


def _interrupted_mark(*, now: datetime) -> None:
    """Whatever still says "running" has no lease any more: its process died or lost the lease."""
    DreamRun.objects.filter(status=DreamRunStatus.RUNNING).update(
        status=DreamRunStatus.INTERRUPTED,
        finished_at=now,
        error="the run stopped before finishing (its process ended or its lease ran out); "
        "the next run resumes what it left",
    )


def _failed_record(run: DreamRun, *, exc: Exception) -> None:
    """What broke between layers (recording a layer's stats, a progress callback) ends the run as
    failed on record, instead of "running" until the next run calls it interrupted. Stats and
    tokens are left as last stored: they may be what could not be saved."""
    run.status = DreamRunStatus.FAILED
    run.error = f"the run stopped: {type(exc).__name__}: {exc}"[:1000]
    run.finished_at = timezone.now()
    DreamRun.objects.filter(pk=run.pk).update(
        status=run.status, error=run.error, finished_at=run.finished_at
    )


def _layer_actor(name: str) -> str:
    return Actor.LLM if name in LLM_LAYERS else Actor.SYSTEM


def dream_run(
    *,
    layer: str = DreamLayer.ALL,
    day: date | None = None,
    trigger: str = "manual",
    since: datetime | None = None,
    force: bool = False,
    on_layer: Callable[[str, dict], None] | None = None,
    on_layer_start: Callable[[str], None] | None = None,
) -> DreamRun:
    """Run DREAM (one layer or all of them, in order) and return its DreamRun. When another run
    holds the lease nothing runs: the returned run is `skipped` and its error says who held it.
    `on_layer_start(name)` and `on_layer(name, result)` report progress. Every audit row a layer
    writes carries the request id `dream-run-<id>`. Without `day` the LLM layers read today so far
    (a direct call; the script-only rebuild, whose day only labels the run); the nightly run, from
    beat or the command, passes `dream_day_ended()`."""
    layers = dream_layers(layer)
    day = day or timezone.localdate()
    holder = holder_here()
    grant = lease_acquire(holder=holder)
    if grant is None:
        return _run_skipped(layer=layer, day=day, trigger=trigger)
    try:
        now = timezone.now()
        _interrupted_mark(now=now)
        run = DreamRun.objects.create(
            layer=layer,
            day=day,
            trigger=trigger[:16],
            stats={"layers": {}, "order": layers},
            started_at=now,
        )
        lease_attach_run(holder=holder, run_id=run.pk)
        with audit_context(actor=Actor.SYSTEM, request_id=f"dream-run-{run.pk}"):
            lease_takeover_record(grant=grant, holder=holder)
        with lease_kept(holder):
            try:
                _layers_run(
                    run,
                    layers=layers,
                    day=day,
                    since=since,
                    force=force,
                    on_layer=on_layer,
                    on_layer_start=on_layer_start,
                )
            except LeaseLost as exc:
                run.status = DreamRunStatus.INTERRUPTED
                run.error = f"{exc}; another run took over"
                run.finished_at = timezone.now()
                run.save(update_fields=["status", "error", "finished_at", "stats", "tokens"])
                return run
            except Exception as exc:
                _failed_record(run, exc=exc)
                raise
        return run
    finally:
        lease_release(holder=holder)


def _layers_run(
    run: DreamRun, *, layers: list[str], day: date, since, force: bool, on_layer, on_layer_start
) -> None:
    config = llm_config_load() if any(name in LLM_LAYERS for name in layers) else None
    errors = []
    for name in layers:
        lease_heartbeat()
        if on_layer_start is not None:
            on_layer_start(name)
        try:
            with audit_context(actor=_layer_actor(name), request_id=f"dream-run-{run.pk}"):
                result = _run_layer(name, run=run, day=day, config=config, since=since, force=force)
        except LeaseLost:
            raise
        except LLMUnavailable as exc:
            result = {"status": "failed", "reason": str(exc)}
        except Exception as exc:
            # One layer's bug must not cost the others their run; it is recorded, not hidden.
            logger.exception("DREAM layer %s failed", name)
            result = {"status": "failed", "reason": f"{type(exc).__name__}: {exc}"[:500]}
        if result["status"] in {"failed", "partial"}:
            reasons = result.get("reason") or "; ".join(result.get("rejected", []))
            errors.append(f"{name}: {reasons}"[:1000])
        run.stats["layers"][name] = result
        run.tokens += int(result.get("tokens", 0))
        DreamRun.objects.filter(pk=run.pk).update(stats=run.stats, tokens=run.tokens)
        if on_layer is not None:
            on_layer(name, result)
    failed = [
        name for name, res in run.stats["layers"].items() if res["status"] in {"failed", "partial"}
    ]
    deterministic_failed = any(name not in LLM_LAYERS for name in failed)
    run.status = (
        DreamRunStatus.FAILED
        if deterministic_failed
        else DreamRunStatus.PARTIAL
        if failed
        else DreamRunStatus.OK
    )
    run.error = "\n".join(errors)
    run.finished_at = timezone.now()
    run.save(update_fields=["status", "error", "finished_at", "stats", "tokens"])
