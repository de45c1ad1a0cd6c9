#!/usr/bin/env bash
# The translation catalogues (`make messages`): every string marked in the code, templates and scripts goes
# into locale/ja/LC_MESSAGES (each app's own locale/ for its files, the project's locale/ for templates/ and
# static/), then the .mo files are compiled beside them. Needs GNU gettext (xgettext, msgfmt).
set -euo pipefail
cd "$(dirname "$0")/.."
export DJANGO_SETTINGS_MODULE=portal.settings DEBUG=1
ignore=(--ignore .venv --ignore var --ignore build --ignore docs --ignore tests --ignore testbed --ignore deploy
        --ignore benchmarks --ignore agent --ignore rpcli --ignore "*.egg-info" --ignore static/plotly)
.venv/bin/python manage.py makemessages -l ja -d django --no-obsolete "${ignore[@]}"
.venv/bin/python manage.py makemessages -l ja -d djangojs --no-obsolete "${ignore[@]}"
# A clean header on every catalogue (Language: ja, not fuzzy), and the entries still untranslated, listed.
find . -path ./.venv -prune -o -path "*/locale/ja/LC_MESSAGES/*.po" -print | sort | while read -r catalogue; do
    .venv/bin/python scripts/po_fill.py "$catalogue" >/dev/null
done
.venv/bin/python manage.py compilemessages -l ja "${ignore[@]}"
