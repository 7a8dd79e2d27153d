"""The ASGI application uvicorn serves (``app.asgi:app``)."""

from app.main import serve_app

app = serve_app()
