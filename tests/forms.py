"""Form payloads shared by tests."""

# The department fields the portal's form and the Django admin both post, as browsers send them.
DEPARTMENT_FIELDS = {
    "name": "",
    "slug": "",
    "guaranteed_gpus": "0",
    "over_quota_weight": "1.00",
    "limit_gpus": "",
    "priority": "0",
    "vlan_id": "",
    "vxlan_vni": "",
    "ib_pkey": "",
    "network_cidr": "",
    "export_path": "",
    "storage_quota_gib": "",
}


def department_form(**fields) -> dict:
    """The portal's department form; `fields` override (values become strings)."""
    return {**DEPARTMENT_FIELDS, **{name: str(value) for name, value in fields.items()}}


def admin_department_form(**fields) -> dict:
    """The Django admin's department form: the same fields plus its read-only inlines' management forms."""
    return {
        **department_form(**fields),
        "memberships-TOTAL_FORMS": "0",
        "memberships-INITIAL_FORMS": "0",
        "dedicated_partitions-TOTAL_FORMS": "0",
        "dedicated_partitions-INITIAL_FORMS": "0",
    }
