"""Identity: the group-to-role rules (no server), and sign-in through the real OpenID Provider and LDAP
directory of scripts/idp-testbed.sh (fixtures: tests/identity_testbed.py, registered in tests/conftest.py)."""
