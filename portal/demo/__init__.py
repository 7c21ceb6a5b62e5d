"""The demo that ``make run`` seeds (``manage.py seed_demo``): tenants, users, nodes and their agent tokens. It sits
above every app it fills, so no app depends on it."""
