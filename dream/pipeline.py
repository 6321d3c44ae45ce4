"""DREAM orchestration: layer 0 → script layer → solidify → combing → night drift → dream.

One run at a time, across processes and machines sharing the database, through a lease row. Every
run is a DreamRun row whose stats grow layer by layer, so an interrupted run shows how far it got;
the next run marks it interrupted. Runs are idempotent per day: the deterministic layers write
nothing when nothing changed, and an LLM layer that already completed today is skipped, so
derived memories are never written twice.
"""

import logging
import uuid
from collections.abc import Callable
from datetime import date, datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from dream import llm_layers
from dream.models import LAYER_ORDER, LLM_LAYERS, DreamLayer, DreamLease, DreamRun, DreamRunStatus
from dream.scanner import chunks_find, scan_run
from dream.script_layer import script_layer_run
from memory.services.errors import InvalidInput
from memory.services.llm import LLMUnavailable, llm_config_load

logger = logging.getLogger("tideline.dream")

LEASE_NAME = "dream"
_EPOCH = datetime(2000, 1, 1, tzinfo=timezone.get_fixed_timezone(0))


def lease_acquire(*, holder: str, seconds: int, name: str = LEASE_NAME) -> bool:
    """Take the lease if nobody holds it (or the holder's time ran out). One conditional UPDATE, so
    of two concurrent callers exactly one wins."""
    try:
        with transaction.atomic():
            DreamLease.objects.get_or_create(name=name, defaults={"expires_at": _EPOCH})
    except IntegrityError:
        pass
    now = timezone.now()
    with transaction.atomic():
        taken = DreamLease.objects.filter(name=name, expires_at__lte=now).update(
            holder=holder, acquired_at=now, expires_at=now + timedelta(seconds=seconds)
        )
    return taken == 1


def lease_release(*, holder: str, name: str = LEASE_NAME) -> None:
    with transaction.atomic():
        DreamLease.objects.filter(name=name, holder=holder).update(expires_at=_EPOCH)


def _layers_for(layer: str) -> list[str]:
    if layer not in DreamLayer.values:
        raise InvalidInput(f"layer must be one of {', '.join(DreamLayer.values)}", field="layer")
    return list(LAYER_ORDER) if layer == DreamLayer.ALL else [layer]


def _done_today(layer: str, day: date, *, exclude_run: int) -> int | None:
    """The id of an earlier run on `day` in which `layer` completed."""
    for run_id, stats in (
        DreamRun.objects.filter(day=day)
        .exclude(pk=exclude_run)
        .order_by("-started_at")
        .values_list("pk", "stats")
    ):
        if ((stats or {}).get("layers", {}).get(layer) or {}).get("status") == "ok":
            return run_id
    return None


def dream_plan(*, layer: str = DreamLayer.ALL, since: datetime | None = None) -> dict:
    """What a run would do, computed without writing anything and without calling the LLM."""
    layers = _layers_for(layer)
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
    if earlier is not None:
        return {"status": "skipped", "reason": f"already done today in run #{earlier}"}
    if name == DreamLayer.SOLIDIFY:
        outcome = llm_layers.solidify_layer(chunks=chunks_find(since=since), day=day, config=config)
    elif name == DreamLayer.COMBING:
        outcome = llm_layers.combing_layer(day=day, config=config)
    elif name == DreamLayer.DRIFT:
        outcome = llm_layers.drift_layer(day=day, config=config)
    else:
        outcome = llm_layers.dream_layer(day=day, config=config)
    return outcome.as_stats()


def dream_run(
    *,
    layer: str = DreamLayer.ALL,
    day: date | None = None,
    trigger: str = "manual",
    since: datetime | None = None,
    force: bool = False,
    on_layer: Callable[[str, dict], None] | None = None,
) -> DreamRun | None:
    """Run DREAM (one layer or all of them, in order). Returns the DreamRun, or None when another
    run holds the lease (nothing is written then). `on_layer(name, result)` reports progress."""
    layers = _layers_for(layer)
    day = day or timezone.localdate()
    holder = uuid.uuid4().hex
    if not lease_acquire(holder=holder, seconds=settings.TIDELINE_DREAM_LEASE_SECONDS):
        logger.info("DREAM %s not started: another run holds the lease", layer)
        return None
    try:
        now = timezone.now()
        # Whatever still says "running" lost its lease: its process died.
        DreamRun.objects.filter(status=DreamRunStatus.RUNNING).update(
            status=DreamRunStatus.INTERRUPTED,
            finished_at=now,
            error="the run stopped before finishing (process ended or lease expired)",
        )
        run = DreamRun.objects.create(
            layer=layer,
            day=day,
            trigger=trigger[:16],
            stats={"layers": {}, "order": layers},
            started_at=now,
        )
        config = llm_config_load() if any(name in LLM_LAYERS for name in layers) else None
        errors = []
        for name in layers:
            try:
                result = _run_layer(name, run=run, day=day, config=config, since=since, force=force)
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
            name
            for name, res in run.stats["layers"].items()
            if res["status"] in {"failed", "partial"}
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
        return run
    finally:
        lease_release(holder=holder)
