"""A Hermes-shaped session, run inside a Hermes Agent environment (not Tideline's): the provider
is found by Hermes' own plugin discovery and driven through Hermes' own MemoryManager, in the
order run_agent.py calls it. Prints what Hermes would have put in front of the model, as JSON.

usage: python hermes_session.py SESSION_ID AGENT_CONTEXT QUERY ANSWER SEARCH
       python hermes_session.py --outage SESSION_ID QUERY ANSWER LIVE_URL
"""

import json
import sys
import time

from agent.memory_manager import MemoryManager
from plugins.memory import discover_memory_providers, load_memory_provider


def main(session_id: str, agent_context: str, query: str, answer: str, search: str) -> dict:
    discovered = {name: available for name, _, available in discover_memory_providers()}
    provider = load_memory_provider("tideline")
    manager = MemoryManager()
    manager.add_provider(provider)
    manager.initialize_all(session_id=session_id, platform="cli", agent_context=agent_context)
    system_prompt = manager.build_system_prompt()
    manager.on_turn_start(1, query)
    prefetched = manager.prefetch_all(query, session_id=session_id)
    manager.sync_all(query, answer, session_id=session_id)
    manager.queue_prefetch_all(query, session_id=session_id)
    manager.flush_pending(timeout=60)
    manager.on_delegation("look up the parser", "the parser checks bounds", child_session_id="c1")
    messages = [
        {"role": "system", "content": "you are hermes"},
        {"role": "user", "content": query},
        {"role": "assistant", "content": answer},
        {"role": "user", "content": [{"type": "text", "text": "thanks, that settles it"}]},
    ]
    manager.on_session_end(messages)
    found = json.loads(manager.handle_tool_call("tideline_search", {"query": search}))
    wrote = json.loads(
        manager.handle_tool_call(
            "tideline_write_fact",
            {"profile_name": "user", "kind": "preference", "predicate": "editor", "value": "helix"},
        )
    )
    tools = sorted(manager.get_all_tool_names())
    schema = [field["key"] for field in provider.get_config_schema()]
    manager.shutdown_all()
    return {
        "discovered": discovered,
        "provider": provider.name,
        "system_prompt": system_prompt,
        "prefetched": prefetched,
        "search": found,
        "wrote": wrote,
        "tools": tools,
        "config_schema": schema,
    }


def outage(session_id: str, query: str, answer: str, live_url: str) -> dict:
    """Tideline down (TIDELINE_URL points nowhere) for a whole turn, then back for the end."""
    provider = load_memory_provider("tideline")
    manager = MemoryManager()
    manager.add_provider(provider)
    started = time.monotonic()
    manager.initialize_all(session_id=session_id, platform="cli", agent_context="primary")
    system_prompt = manager.build_system_prompt()
    prefetched = manager.prefetch_all(query, session_id=session_id)
    manager.sync_all(query, answer, session_id=session_id)
    manager.flush_pending(timeout=60)
    down_seconds = time.monotonic() - started
    # The server comes back: same provider, its queue still holding the turn it could not send.
    provider._client.base_url = live_url
    manager.on_session_end(
        [{"role": "user", "content": query}, {"role": "assistant", "content": answer}]
    )
    manager.shutdown_all()
    return {"system_prompt": system_prompt, "prefetched": prefetched, "down_seconds": down_seconds}


if __name__ == "__main__":
    if sys.argv[1] == "--outage":
        print(json.dumps(outage(*sys.argv[2:6]), ensure_ascii=False))
    else:
        print(json.dumps(main(*sys.argv[1:6]), ensure_ascii=False))
