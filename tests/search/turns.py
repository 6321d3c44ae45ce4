"""Turns recorded through the real write service, with their after-commit embedding run."""

from memory.services.timeline import TurnInput, session_start, turns_record


def record(scope, external_id, lines, when, callbacks):
    """One session of `lines` ((speaker, text) pairs, all the user's role) at `when`; `callbacks`
    is pytest-django's django_capture_on_commit_callbacks. Returns the stored turns."""
    session = session_start(runtime="test", external_id=external_id, scope_id=scope.pk)
    with callbacks(execute=True):
        return turns_record(
            session_id=session.pk,
            turns=[
                TurnInput(role="user", speaker=speaker, content=text, occurred_at=when)
                for speaker, text in lines
            ],
        )
