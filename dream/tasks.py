"""Celery tasks for DREAM and the beat schedule: thin, taking dates and layer names only."""

from celery import shared_task
from django.utils.dateparse import parse_date

from dream.models import DreamLayer


@shared_task(ignore_result=True)
def dream_daily(day: str | None = None, layer: str = DreamLayer.ALL) -> int | None:
    """The nightly DREAM. Returns the DreamRun id, or None if another run held the lease."""
    from dream.pipeline import dream_run

    run = dream_run(layer=layer, day=parse_date(day) if day else None, trigger="celery")
    return run.pk if run else None


@shared_task(ignore_result=True)
def clusters_rebuild() -> int | None:
    """The script layer alone (clusters, entity graph, recurrence), between nightly runs."""
    from dream.pipeline import dream_run

    run = dream_run(layer=DreamLayer.SCRIPT, trigger="celery")
    return run.pk if run else None


@shared_task(ignore_result=True)
def maintain() -> dict:
    """Hourly lifecycle maintenance (TTL, decay, scope-gone), owned by the memory store."""
    # Imported at run time: the lifecycle service lives with the store, not with DREAM.
    from memory.services.maintenance import lifecycle_maintain

    report = lifecycle_maintain(dry_run=False)
    return {"expired": report.expired, "checked": report.checked}
