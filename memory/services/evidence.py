from memory.models import ContextTurn, Evidence, Memory
from memory.services.errors import InvalidInput


def evidence_validate(*, turn_ids: list[int], scope_id: int) -> None:
    """Evidence must point at turns that exist and belong to the memory's own scope — a memory never
    borrows texture from another project's timeline."""
    if not turn_ids:
        return
    found = set(
        ContextTurn.objects.filter(pk__in=turn_ids, scope_id=scope_id).values_list("pk", flat=True)
    )
    missing = sorted(set(turn_ids) - found)
    if missing:
        raise InvalidInput(
            f"source turns {missing} do not exist in this memory's scope", field="source_turn_ids"
        )


def evidence_link(*, memory: Memory, turn_ids: list[int], quote: str = "") -> list[int]:
    """Link a memory to the raw turns it came from (inside the caller's transaction). Returns the
    ids newly linked; links that already exist are kept as they are."""
    existing = set(
        Evidence.objects.filter(memory=memory, turn_id__in=turn_ids).values_list(
            "turn_id", flat=True
        )
    )
    new_ids = [turn_id for turn_id in dict.fromkeys(turn_ids) if turn_id not in existing]
    Evidence.objects.bulk_create(
        [Evidence(memory=memory, turn_id=turn_id, quote=quote) for turn_id in new_ids]
    )
    return new_ids
