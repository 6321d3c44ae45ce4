import pytest

from memory.models import MemoryStatus, SelfConcept
from memory.services.errors import InvalidInput
from memory.services.self_concept import self_concept_current, self_concept_write


def test_it_keeps_every_version_of_the_self_concept(db):
    first = self_concept_write(field="terrain", content="I help one developer build memory tools")
    second = self_concept_write(field="terrain", content="I am the memory of a small team")
    first.refresh_from_db()
    assert first.status == MemoryStatus.SUPERSEDED
    assert second.supersedes_id == first.pk
    assert self_concept_current(field="terrain").content == "I am the memory of a small team"
    assert SelfConcept.objects.count() == 2


@pytest.mark.parametrize("empty", ["", "   ", None])
def test_it_rejects_an_empty_self_concept_and_keeps_the_old_one(db, empty):
    self_concept_write(field="fact", content="My name is Tide")
    with pytest.raises(InvalidInput):
        self_concept_write(field="fact", content=empty)
    assert self_concept_current(field="fact").content == "My name is Tide"
    assert SelfConcept.objects.count() == 1


def test_it_rejects_an_unknown_field(db):
    with pytest.raises(InvalidInput):
        self_concept_write(field="mood", content="fine")
