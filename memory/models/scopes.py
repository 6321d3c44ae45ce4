from django.db import models


class ScopeKind(models.TextChoices):
    GLOBAL = "global", "global"
    WORKSPACE = "workspace", "workspace"
    PROJECT = "project", "project"


# Labels the owner reads on the panel ("项目·archive-manager"), never a hash.
SCOPE_KIND_LABELS = {
    ScopeKind.GLOBAL: "全局",
    ScopeKind.WORKSPACE: "工作区",
    ScopeKind.PROJECT: "项目",
}


class Scope(models.Model):
    """Who a memory belongs to: the user everywhere (global), this machine, or one project."""

    kind = models.CharField(max_length=16, choices=ScopeKind.choices)
    # Normalised git remote URL or canonical path for projects, a name for workspaces,
    # "global" for the single global scope.
    key = models.CharField(max_length=512)
    label = models.CharField(max_length=200)
    # The workspace a project lives in, so a project session also sees its machine's memories.
    workspace = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="projects",
        limit_choices_to={"kind": ScopeKind.WORKSPACE},
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["kind", "key"], name="scope_kind_key_unique")
        ]
        ordering = ["kind", "label"]

    def __str__(self) -> str:
        return f"[{self.label}]"
