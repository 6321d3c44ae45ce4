"""One bench run with the fused embedder at e5 share A and a calibration patched in-process.
usage: tune.py A W NOISE -- bench args..."""

import os
import sys

a, w, noise = (float(x) for x in sys.argv[1:4])
args = sys.argv[sys.argv.index("--") + 1 :]
os.environ["DJANGO_SETTINGS_MODULE"] = "tideline_site.settings"
sys.path.insert(0, os.getcwd())
import django

django.setup()
from django.core.management import call_command

from memory.search import calibration
from tools.e5.fused import fused_install

model_id = fused_install(
    weight=a, cache_dir=os.environ.get("E5_CACHE_DIR", "/tmp/e5work/cache")
).model_id
calibration.CALIBRATIONS[model_id] = calibration.Calibration(
    noise_floor=noise,
    semantic_floor=noise,
    turn_floor=0.0,
    semantic_weight=w,
    turn_semantic_weight=w,
    lexical_floor_share=0.5,
    session_semantic_weight=w,
    session_turn_share=0.3,
    session_supersede_cosine=None,
)
print("tune", model_id, calibration.CALIBRATIONS[model_id], flush=True)
call_command("bench", *args)
