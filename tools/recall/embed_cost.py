"""What a turn's vector costs to compute, own text (TIDELINE_SEARCH_TURN_EMBED_WINDOW=0) against
the ±1-turn window (the default 1), with the bundled embedder on one LoCoMo conversation:

    nice -n 19 .venv/bin/python tools/recall/embed_cost.py [conversation index, default 0]

Prints embedded texts/s and characters per text for both, in the batch size the app uses. With the
window, a turn recorded alone also re-embeds the turn before it (its window gained a successor), so
live capture pays two window embeddings per turn.
"""

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tideline_site.settings")
import django

django.setup()
from django.conf import settings

from memory.bench.locomo import conversation_sessions
from memory.services.embedding import EMBED_TEXT_MAX_CHARS, embedder_get

DATA = Path(__file__).resolve().parents[3] / "shared/bench/locomo/locomo10.json"


def texts_for(turns: list[dict], window: int) -> list[str]:
    lines = [f"{turn['speaker']}: {turn['text']}" for turn in turns]
    return [
        "\n".join(lines[max(0, i - window) : i + window + 1])[:EMBED_TEXT_MAX_CHARS]
        for i in range(len(lines))
    ]


def main() -> None:
    number = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    sample = json.loads(DATA.read_text())[number]
    sessions = [turns for _, _, turns in conversation_sessions(sample["conversation"])]
    embedder = embedder_get()
    batch = settings.TIDELINE_EMBEDDER_BATCH
    embedder.embed_passages(["warm-up"])
    for window in (0, 1):
        texts = [text for turns in sessions for text in texts_for(turns, window)]
        started = time.perf_counter()
        for start in range(0, len(texts), batch):
            embedder.embed_passages(texts[start : start + batch])
        elapsed = time.perf_counter() - started
        print(
            f"window {window}: {len(texts)} texts, {sum(map(len, texts)) / len(texts):.0f} chars "
            f"each, {len(texts) / elapsed:.0f} texts/s"
        )


if __name__ == "__main__":
    main()
