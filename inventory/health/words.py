"""Health reasons stored in English, as templates the portal reads back in the viewer's language.

A tray's state reason and its timeline's actions are stored in English: Slurm's and Kubernetes' drain
reasons are these texts, and the audit and the API read them as written. A page shows them with the
`sentence_html` filter (core.sentences_i18n), which finds the template again and translates it, values
(the person's name, what they typed) kept. Importing this module registers the templates: the modules that
write these reasons (inventory.health.actions, inventory.health.returns) import it.
"""

from __future__ import annotations

from core.sentences import gettext_noop

# Every reason Rackplane gives a drain starts with its owner's name (as Slurm's reasons do):
# inventory.health.actions.REASON_PREFIX.
OWNED_BY_RACKPLANE = gettext_noop("rackplane: %(reason)s")
# A maintenance by hand (integrations.views.tray_actions.maintenance_reason after hand_reason): who, what
# they typed.
MAINTENANCE_BY = gettext_noop("%(who)s: maintenance: %(reason)s")
# ... with a window (its two moments in UTC, named; a page shows them in the viewer's zone).
MAINTENANCE_WINDOW_BY = gettext_noop("%(who)s: maintenance window %(at)s to %(ends_at)s: %(reason)s")
# A return to service (inventory.health.returns): by whom (or by the rules), and why it could return.
RETURNED = gettext_noop("returned to service: %(why)s")
RETURNED_BY = gettext_noop("%(who)s: returned to service: %(why)s")
FORCED = gettext_noop("forced (%(why)s)")
