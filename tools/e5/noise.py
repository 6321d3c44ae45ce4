"""Cosine distributions of unrelated and gold pairs, USE vs e5 parts, as calibration.py documents
for the USE row: 150 LoCoMo questions vs 900 turns of other conversations; 100 RealMem user turns
vs 200 user turns of another persona; LoCoMo (question, evidence turn) pairs."""

import glob
import json
import os
import random
import sys

os.environ["DJANGO_SETTINGS_MODULE"] = "tideline_site.settings"
os.environ.setdefault("E5_CACHE_DIR", "/tmp/e5work/cache")
sys.path.insert(0, os.getcwd())
import django

django.setup()
import numpy as np

from memory.bench.locomo import evidence_normalise
from memory.services.embedding import BundledEmbedder
from tools.e5.fused import E5Embedder

use, e5 = BundledEmbedder(), E5Embedder(cache_dir=os.environ["E5_CACHE_DIR"])
rng = random.Random(14)
data = json.load(open("/work/shared/bench/locomo/locomo10.json"))


def turns_of(sample):
    out = {}
    c = sample["conversation"]
    for k in c:
        if k.startswith("session_") and isinstance(c[k], list):
            for t in c[k]:
                text = t["text"] + (
                    f" and shared {t['blip_caption']}" if t.get("blip_caption") else ""
                )
                out[t["dia_id"]] = f'{t["speaker"]} said, "{text}"'
    return out


questions, others = [], []
for i, s in enumerate(data):
    qs = [q for q in s["qa"] if evidence_normalise(q.get("evidence"))]
    questions += [(i, q["question"]) for q in rng.sample(qs, 15)]
    others += [(i, t) for t in rng.sample(sorted(turns_of(s).values()), 90)]
qv_u = np.stack([use.embed_query(q) for _, q in questions])
qv_e = np.stack([e5.embed_query(q) for _, q in questions])
tv_u = use.embed_passages([t for _, t in others])
tv_e = e5.embed_passages([t for _, t in others])
mask = np.array([[qi != ti for ti, _ in others] for qi, _ in questions])
lo_u, lo_e = (qv_u @ tv_u.T)[mask], (qv_e @ tv_e.T)[mask]

# gold pairs
gq, gt = [], []
for s in data:
    turns = turns_of(s)
    for q in rng.sample([q for q in s["qa"] if evidence_normalise(q.get("evidence"))], 30):
        for d in evidence_normalise(q["evidence"]):
            if d in turns:
                gq.append(q["question"])
                gt.append(turns[d])
g_u = np.einsum("ij,ij->i", np.stack([use.embed_query(q) for q in gq]), use.embed_passages(gt))
g_e = np.einsum("ij,ij->i", np.stack([e5.embed_query(q) for q in gq]), e5.embed_passages(gt))

files = sorted(glob.glob("/work/shared/bench/realmem/dataset/*.json"))


def users(f):
    d = json.load(open(f))
    return [
        t["content"]
        for s in d["dialogues"]
        for t in s["dialogue_turns"]
        if t["speaker"] == "User" and t["content"].strip()
    ]


ua, ub = rng.sample(users(files[0]), 100), rng.sample(users(files[1]), 200)
r_u = (np.stack([use.embed_query(t) for t in ua]) @ use.embed_passages(ub).T).ravel()
r_e = (np.stack([e5.embed_query(t) for t in ua]) @ e5.embed_passages(ub).T).ravel()


def stats(x):
    return f"median {np.median(x):.3f} p95 {np.percentile(x, 95):.3f}"


for a in [0.0, 0.5, 0.6, 0.75, 1.0]:
    lo, ro, go = (1 - a) * lo_u + a * lo_e, (1 - a) * r_u + a * r_e, (1 - a) * g_u + a * g_e
    print(
        f"a={a}: locomo unrelated {stats(lo)} | realmem unrelated {stats(ro)} | gold median {np.median(go):.3f} p10 {np.percentile(go, 10):.3f} | gold>=unrelated-p95 {np.mean(go >= np.percentile(lo, 95)):.2f}"
    )
