"""Celery tasks for DREAM and the beat schedule: thin, taking dates and layer names only."""

import logging

from celery import shared_task
from django.utils.dateparse import parse_date

from dream.models import DreamLayer, DreamRunStatus

logger = logging.getLogger("tideline.dream")


def _reported(run) -> int:
    """The run id; a run that could not start (lease held) is logged with who held it, and its
    DreamRun row keeps the reason for the owner."""
    if run.status == DreamRunStatus.SKIPPED:
        logger.warning("DREAM task did nothing, run #%s: %s", run.pk, run.error)
    return run.pk


@shared_task(ignore_result=True)
def dream_daily(day: str | None = None, layer: str = DreamLayer.ALL) -> int:
    """The nightly DREAM, for `day` or else the day that just ended (beat sends no day). Returns
    the DreamRun id (a `skipped` run if another held the lease)."""
    from dream.pipeline import dream_day_ended, dream_run

    return _reported(
        dream_run(layer=layer, day=parse_date(day) if day else dream_day_ended(), trigger="celery")
    )


@shared_task(ignore_result=True)
def clusters_rebuild() -> int:
    """The script layer alone (clusters, entity graph, recurrence), between nightly runs."""
    from dream.pipeline import dream_run

    return _reported(dream_run(layer=DreamLayer.SCRIPT, trigger="celery"))


@shared_task(ignore_result=True)
def maintain() -> dict:
    """Hourly lifecycle maintenance (TTL, decay, scope-gone), owned by the memory store."""
    # Imported at run time: the lifecycle service lives with the store, not with DREAM.
    from memory.services.maintenance import lifecycle_maintain

    report = lifecycle_maintain(dry_run=False)
    return {"expired": report.expired, "checked": report.checked}
