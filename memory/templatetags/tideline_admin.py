"""Template filters of the owner panel."""

from django import template

from memory.admin.display import dream_layer_rows

register = template.Library()


@register.filter
def layer_rows(stats) -> list[dict]:
    return dream_layer_rows(stats)
