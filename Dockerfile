# Triplet Lab: `docker compose up` runs it on PostgreSQL (see docker-compose.yml).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    TRIPLETLAB_HOST=0.0.0.0 \
    TRIPLETLAB_PORT=8000 \
    TRIPLETLAB_DATA_DIR=/data

RUN useradd --create-home --uid 10001 tripletlab \
    && mkdir -p /data && chown tripletlab /data

WORKDIR /app
COPY pyproject.toml README.md alembic.ini ./
COPY app ./app
COPY migrations ./migrations
COPY frontend ./frontend
# Editable, so the package finds migrations/ and frontend/ beside it.
RUN pip install --no-cache-dir -e .

USER tripletlab
VOLUME ["/data"]
EXPOSE 8000

# `serve` applies the migrations before it starts.
ENTRYPOINT ["tripletlab"]
CMD ["serve"]
