"""A researcher's preview of a study: the worker page as a worker sees it, counted nowhere.

The dashboard asks for a preview token (:func:`make_token`: the project and an expiry,
signed with the server's secret, so nothing is stored) and opens the worker page with it;
the page passes it on when it opens its session, and the worker API opens a session with
``source="preview"`` (its participant on the platform ``preview``). Its answers carry that
source, and every reader of answers leaves them out (``imports.visible_answers``): counts,
exports, the study bundle, training, the budget adviser, the stop rules.

A preview takes questions from the same pool as the workers, and answering one takes a
place among the answers the question wants: :func:`release_places` (run by the job
runner, and when a study is launched) gives those places back, so the question is asked of
a worker instead, and a comparison forest, which never sees a preview's vote, does not wait
for it.
"""

from __future__ import annotations

import hmac
import time
from collections import Counter
from datetime import UTC, datetime

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from app.config import get_settings
from app.db.models import Answer, Project, Query, Question, WorkSession
from app.db.session import begin_write
from app.errors import Forbidden
from app.services.sessions import _secret
from app.services.study_state import PREVIEW

PLATFORM = "preview"  # the participants of preview sessions
TOKEN_SECONDS = 2 * 3600  # a preview link opens sessions for two hours
RELEASED = "previewed"  # a preview's answered query whose place was given back


def _signature(payload: str) -> str:
    settings = get_settings()
    secret = _secret(str(settings.data_dir), settings.secret_key)
    return hmac.new(secret, f"preview:{payload}".encode(), "sha256").hexdigest()[:32]


def make_token(project: Project, now: float | None = None) -> tuple[str, datetime]:
    """A preview token for ``project`` and when it expires."""
    expires = int((time.time() if now is None else now) + TOKEN_SECONDS)
    payload = f"{project.id}.{expires}"
    return f"{payload}.{_signature(payload)}", datetime.fromtimestamp(expires, UTC)


def check_token(project: Project, token: str, now: float | None = None) -> None:
    """403 unless ``token`` is a live preview token of ``project``."""
    project_id, _, rest = token.partition(".")
    expires, _, signature = rest.partition(".")
    payload = f"{project_id}.{expires}"
    if not hmac.compare_digest(signature.encode(), _signature(payload).encode()):
        raise Forbidden("not a preview token of this server: open the preview from the dashboard")
    if project_id != str(project.id):
        raise Forbidden("this preview token belongs to another project")
    if not expires.isdigit() or int(expires) < (time.time() if now is None else now):
        raise Forbidden("this preview link has expired: open the preview again from the dashboard")


def answers_previewed(db: Session, project: Project) -> int:
    """How many answers previews of ``project`` gave (the launch checklist's "previewed")."""
    statement = select(func.count()).where(
        Answer.project_id == project.id, Answer.source == PREVIEW
    )
    return int(db.scalar(statement) or 0)


def release_places(db: Session, project_id: int | None = None) -> int:
    """Give back the places that previews' answers took among their questions' wanted
    answers (of one project, or of all); how many. Each answered query of a preview is
    marked ``previewed`` in the statement that finds it, so two runners never give one
    place back twice."""
    sessions = select(WorkSession.id).where(WorkSession.source == PREVIEW)
    if project_id is not None:
        sessions = sessions.where(WorkSession.project_id == project_id)
    answered = (
        Query.session_id.in_(sessions),
        Query.status == "answered",
        ~Query.is_repeat,  # a repeat never held a place
    )
    if project_id is not None:
        answered = (*answered, Query.project_id == project_id)
    if db.scalar(select(Query.id).where(*answered).limit(1)) is None:
        db.rollback()
        return 0
    begin_write(db)
    released = db.scalars(
        update(Query)
        .where(*answered)
        .values(status=RELEASED)
        .returning(Query.question_id)
        .execution_options(synchronize_session=False)
    ).all()
    for question_id, count in Counter(released).items():
        answered_now = Question.answered - count
        db.execute(
            update(Question)
            .where(Question.id == question_id)
            .values(answered=answered_now, is_open=answered_now + Question.live < Question.wanted)
        )
    db.commit()
    return len(released)
