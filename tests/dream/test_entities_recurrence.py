import pytest

from dream.script_layer import entities_role_parse, entity_graph_rebuild, recurrence_refresh
from dream.selectors import entity_graph_read
from memory.models import AuditEvent, Narrative
from memory.services.facts import FactInput, fact_write


def test_it_links_a_profile_known_only_from_secret_facts_for_the_owner_only(
    project_scope, write_narrative
):
    write_narrative(project_scope, "Vance reviewed the plan", entities_role="Vance=审查")
    fact_write(
        data=FactInput(
            scope_id=project_scope.pk,
            profile_name="Vance",
            kind="fact",
            predicate="treats",
            value="insomnia",
            secret=True,
        )
    )
    entity_graph_rebuild()

    def linked(**read) -> object:
        (node,) = entity_graph_read(scope_ids=[project_scope.pk], **read)["nodes"]
        return node["profile_id"]

    assert linked() is None
    assert linked(include_secret=True) is not None


def test_it_parses_entities_role():
    assert entities_role_parse("A=判断+执行; B=审查") == [("A", ["判断", "执行"]), ("B", ["审查"])]
    assert entities_role_parse("照照＝审查；甜心") == [("照照", ["审查"]), ("甜心", [])]
    assert entities_role_parse("") == []


def test_it_builds_the_entity_graph_with_role_pairs_and_cooccurrence(
    global_scope, project_scope, write_narrative
):
    write_narrative(global_scope, "A reviewed what B carried out", entities_role="A=审查; B=执行")
    fact_write(
        data=FactInput(
            scope_id=global_scope.pk,
            profile_name="A",
            kind="fact",
            predicate="works_as",
            value="reviewer",
        )
    )
    stats = entity_graph_rebuild()
    assert stats == {"nodes": 2, "edges": 1, "changed": True}
    graph = entity_graph_read(scope_ids=[global_scope.pk])
    assert graph["edges"] == [
        {
            "a": "A",
            "b": "B",
            "cooccurrence": 1,
            "role_pairs": [{"a_roles": "审查", "b_roles": "执行", "count": 1}],
        }
    ]
    nodes = {node["name"]: node for node in graph["nodes"]}
    assert nodes["A"]["roles"] == {"审查": 1} and nodes["A"]["profile_id"] is not None
    assert nodes["B"]["profile_id"] is None

    write_narrative(project_scope, "C decided, A reviewed", entities_role="C=判断; A=审查")
    entity_graph_rebuild()
    # A project's graph is not visible from global, and the same rebuild twice is a no-op.
    assert len(entity_graph_read(scope_ids=[global_scope.pk])["edges"]) == 1
    assert len(entity_graph_read(scope_ids=[global_scope.pk, project_scope.pk])["edges"]) == 2
    assert entity_graph_rebuild()["changed"] is False
    assert AuditEvent.objects.filter(target_type="entitynode").count() == 2


def test_it_restores_corrupted_recurrence_and_weights_from_current_tags(
    global_scope, write_narrative
):
    for index in range(4):
        write_narrative(global_scope, f"boundary note {index}", tags=["边界"])
    write_narrative(global_scope, "untagged")
    write_narrative(global_scope, "a lone tag", tags=["solo"])
    expected = dict(Narrative.objects.values_list("pk", "recurrence"))
    expected_weight = dict(Narrative.objects.values_list("pk", "weight"))
    assert sorted(expected.values()) == [1, 3, 3, 3, 3, 3]
    Narrative.objects.update(recurrence=5, weight=0.99)

    stats = recurrence_refresh()
    assert stats["recurrence_changed"] == 6
    assert dict(Narrative.objects.values_list("pk", "recurrence")) == expected
    for pk, weight in Narrative.objects.values_list("pk", "weight"):
        assert weight == pytest.approx(expected_weight[pk])
    audit = AuditEvent.objects.get(target_type="narrative", reason__startswith="recurrence")
    assert set(audit.after["recurrence"]) == {str(pk) for pk in expected}

    assert recurrence_refresh()["recurrence_changed"] == 0
    assert AuditEvent.objects.filter(reason__startswith="recurrence").count() == 1
