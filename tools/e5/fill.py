"""Fill the e5 cache with exactly the texts the benches embed. usage: fill.py locomo i,j,.. | realmem i,j"""

import glob
import json
import os
import sys

os.environ["DJANGO_SETTINGS_MODULE"] = "tideline_site.settings"
sys.path.insert(0, os.getcwd())
import django

django.setup()
from memory.bench.locomo import conversation_sessions
from memory.bench.realmem import persona_queries
from memory.services.embedding import EMBED_TEXT_MAX_CHARS
from tools.e5.fused import E5Embedder

e5 = E5Embedder(cache_dir="/tmp/e5work/cache")
kind, which = sys.argv[1], [int(x) for x in sys.argv[2].split(",")]


def windows(sessions):
    out = []
    for lines in sessions:
        for i in range(len(lines)):
            out.append("\n".join(lines[max(0, i - 1) : i + 2])[:EMBED_TEXT_MAX_CHARS])
    return out


def run(passages, memories, queries):
    if os.environ.get("FILL_PHASE", "first") == "first":
        for n, t in enumerate(passages):
            e5.embed_passages([t])
            if n % 200 == 0:
                print(kind, which, "windows", n, len(passages), flush=True)
        for q in queries:
            e5.embed_query(q)
    else:
        for n, t in enumerate(memories):
            e5.embed_passages([t])
            if n % 200 == 0:
                print(kind, which, "memories", n, len(memories), flush=True)


if kind == "locomo":
    data = json.load(open("/work/shared/bench/locomo/locomo10.json"))
    for i in which:
        s = data[i]
        sessions, memories = [], []
        for _, _, turns in conversation_sessions(s["conversation"]):
            lines = []
            for t in turns:
                text = t["text"] + (
                    f" and shared {t['blip_caption']}" if t.get("blip_caption") else ""
                )
                lines.append(f"{t['speaker']}: {text}")
                memories.append(f'{t["speaker"]} said, "{text}"')
            sessions.append(lines)
        run(windows(sessions), memories, [q["question"] for q in s["qa"]])
else:
    files = sorted(glob.glob("/work/shared/bench/realmem/dataset/*.json"))
    for i in which:
        d = json.load(open(files[i]))["dialogues"][: int(os.environ.get("FILL_SESSIONS", "100000"))]
        sessions, memories = [], []
        for s in d:
            kept = [t for t in s["dialogue_turns"] if t.get("content", "").strip()]
            sessions.append([f"{t['speaker']}: {t['content']}" for t in kept])
            memories += [t["content"] for t in kept if t["speaker"] == "User"]
        run(windows(sessions), memories, [q[2] for q in persona_queries(d)])
print("done", kind, which)
