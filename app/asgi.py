"""The ASGI application uvicorn serves (``app.asgi:app``)."""

from app.main import create_app

app = create_app()
