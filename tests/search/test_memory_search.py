from memory.search import memory_search


def test_it_finds_a_two_character_chinese_word(project_scope, write_narrative):
    target = write_narrative(project_scope, "处理边界条件时先写兜底逻辑")
    write_narrative(project_scope, "今天把数据库迁移到了新的服务器")
    hits = memory_search(query="边界", scope_ids=[project_scope.pk])
    assert hits[0].memory.pk == target.pk
    assert "边界" in hits[0].why["matched_terms"]


def test_it_finds_neovim_from_nvim_by_meaning(project_scope, write_narrative):
    target = write_narrative(project_scope, "写代码用 neovim")
    write_narrative(project_scope, "周末去海边散步，天气很好")
    write_narrative(project_scope, "数据库备份每天凌晨三点运行")
    hits = memory_search(query="编辑器是 nvim", scope_ids=[project_scope.pk])
    assert hits and hits[0].memory.pk == target.pk
    assert hits[0].why["matched_terms"] == []
    assert hits[0].semantic is not None


def test_it_returns_nothing_without_scopes(project_scope, write_narrative):
    write_narrative(project_scope, "whale-listen is the service name")
    assert memory_search(query="whale-listen", scope_ids=[]) == []
