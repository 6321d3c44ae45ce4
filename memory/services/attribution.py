"""Which scope a memory belongs to, by what it is about (seed 003 归属, DESIGN §3.2).

The user's profile — name, job, preferences — is global: it follows the user into every project.
This machine's environment belongs to the workspace. A project's features, bugs and decisions
belong to the project it was said in. The same rules serve direct writes (REST, MCP) and captured
utterances (the inbox); an explicit scope from the caller always wins.
"""

import re
from dataclasses import dataclass

from memory.models import FactKind, ProfileKind

GLOBAL = "global"
WORKSPACE = "workspace"
PROJECT = "project"

# A sentence whose subject is the user, after first person was rewritten to a named subject.
USER_SUBJECT = re.compile(r"^(?:用户|The user|El usuario|Al usuario|ユーザーは)", re.IGNORECASE)
USER_PREFERENCE = re.compile(
    r"^(?:用户|The user|El usuario|Al usuario|ユーザーは).{0,40}?"
    r"(?:希望|喜欢|偏好|习惯|讨厌|不喜欢|想要|prefer|like|love|hate|dislike|want|"
    r"prefiere|gusta|odia|好き|好む|苦手|希望)",
    re.IGNORECASE,
)
MACHINE = re.compile(
    r"装在|安装在|数据目录|本机|这台(?:电脑|机器)|installed (?:at|in|under)|data dir(?:ectory)?"
    r"|on this machine|instalad[oa] en|directorio de datos|en esta máquina"
    r"|にインストール|データディレクトリ|このマシン",
    re.IGNORECASE,
)
MACHINE_PREDICATE = re.compile(
    r"^(?:os|shell|machine_\w+|hostname|gpu|cpu|ram|disk_\w+|install_\w+|\w+_install_path"
    r"|\w+_version|data_dir|locale|timezone)$"
)
# What a user fact is about when it describes the person, not an event in one project.
USER_PROFILE_KINDS = (
    FactKind.PREFERENCE,
    FactKind.FACT,
    FactKind.IMPRESSION,
    FactKind.RELATIONSHIP,
)


@dataclass(frozen=True)
class Attribution:
    hint: str
    why: str


def fact_attribute(*, kind: str, profile_kind: str, predicate: str, value: str) -> Attribution:
    if MACHINE_PREDICATE.match(predicate) or MACHINE.search(value):
        return Attribution(WORKSPACE, "about this machine's environment, which is the workspace's")
    if profile_kind == ProfileKind.USER and kind in USER_PROFILE_KINDS:
        return Attribution(GLOBAL, "about the user, whose profile is global")
    if profile_kind == ProfileKind.SELF:
        return Attribution(GLOBAL, "about the agent itself, whose identity is global")
    return Attribution(PROJECT, "a fact of the place it was said in")


def text_attribute(*, text: str) -> Attribution:
    if MACHINE.search(text):
        return Attribution(WORKSPACE, "about this machine's environment, which is the workspace's")
    if USER_PREFERENCE.match(text.strip()):
        return Attribution(GLOBAL, "a preference of the user, whose profile is global")
    return Attribution(PROJECT, "about the work in the place it was said in")
