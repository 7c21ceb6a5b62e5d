# Corral's production image: one image for web, worker, beat and agent (docker-compose.yml picks the command).
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    CORRAL_DATA_DIR=/var/lib/corral

# An unprivileged user for every process; the agent then runs jobs as this user too (it never needs root here).
RUN useradd --system --uid 10001 --create-home --home-dir /home/corral --shell /usr/sbin/nologin corral \
    && mkdir -p /var/lib/corral/tokens /var/lib/corral/agent \
    && chown -R corral: /var/lib/corral

WORKDIR /app
COPY . /app
# Editable, so settings.BASE_DIR stays /app and templates/ and static/ are found next to the code.
RUN pip install --editable . \
    && python manage.py collectstatic --noinput --verbosity 0 \
    && chown -R corral: /var/lib/corral

USER corral
EXPOSE 8000
CMD ["gunicorn", "portal.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "3", "--threads", "8", \
     "--worker-class", "gthread", "--access-logfile", "-"]
