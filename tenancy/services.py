"""Department workflows with their invariants, inside transactions.

Every write that could break "the guarantees fit the schedulable healthy GPUs" locks the TenancySettings
row first, so two admins saving departments at once are serialized and cannot together overbook.
"""

import ipaddress
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Count, Func, IntegerField, Q, QuerySet, Subquery, Sum
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from core.access import Role, is_admin
from core.notifications.subscriptions import forget_department
from inventory.choices import GpuHealth, MigMode, TrayState
from inventory.mig_layouts import WHOLE_GPU_LAYOUTS
from inventory.models import ComputeTray, Gpu
from tenancy import naming
from tenancy.choices import RoleOrigin
from tenancy.models import DedicatedPartition, Department, Membership, TenancySettings
from tenancy.models.departments import PKEY_MAX, PKEY_MIN, VLAN_MAX, VLAN_MIN, VNI_MAX, VNI_MIN
from tenancy.projects import check_department_guarantee, ensure_default_project, forget_department_member
from tenancy.renderers import networks_overlap

# Fields the department form and API may set; isolation fields are allocated when left empty.
QUOTA_FIELDS = ("name", "slug", "guaranteed_gpus", "over_quota_weight", "limit_gpus", "priority")
ISOLATION_FIELDS = ("vlan_id", "vxlan_vni", "ib_pkey", "network_cidr", "export_path", "storage_quota_gib")
# The answer when a department's name or slug is taken (one sentence per field: word order differs).
TAKEN = {
    "name": gettext_lazy("a department with this name already exists"),
    "slug": gettext_lazy("a department with this slug already exists"),
}


def schedulable_gpus_q(prefix: str = "") -> Q:
    """GPUs a job may be given whole: in a tray that is up, not unhealthy, not in MIG mode (a GPU cut
    into MIG instances is not a whole GPU, and its instances have no NVLink peer-to-peer: never part of a
    job spanning GPUs or trays), and in a tray no MIG layout was chosen for (inventory.services.mig: from the
    choice on, whole-GPU work is kept off it, so the GPU Operator's MIG manager finds it idle)."""
    return (
        Q(**{f"{prefix}tray__state": TrayState.UP})
        & ~Q(**{f"{prefix}health": GpuHealth.UNHEALTHY})
        & ~Q(**{f"{prefix}mig_mode": MigMode.ENABLED})
        & Q(**{f"{prefix}tray__mig_layout__in": WHOLE_GPU_LAYOUTS})
    )


def unschedulable_gpus_q_parts() -> tuple[Q, Q]:
    """`schedulable_gpus_q`'s complement as two conditions on GPUs, one on their own fields and one on their
    tray's: a GPU is not schedulable when either holds. Each finds its few GPUs by an index (GPUs by health
    and MIG mode; the few trays that are not up or have a MIG layout), where their union in one condition
    would filter every GPU joined to its tray."""
    return (
        Q(health=GpuHealth.UNHEALTHY) | Q(mig_mode=MigMode.ENABLED),
        ~Q(tray__state=TrayState.UP) | ~Q(tray__mig_layout__in=WHOLE_GPU_LAYOUTS),
    )


def unschedulable_gpus() -> QuerySet[Gpu]:
    """The complement of `schedulable_gpus_q`: GPUs out of any tray, unhealthy, in MIG mode, or in a tray that
    is not up.

    Written as a union of index lookups (GPUs by tray_id / health, trays that are not up) because these are
    few: counting them is cheap, where filtering all 72,000 GPUs joined to their trays is not.
    """
    trayless_or_unhealthy = Gpu.objects.filter(
        Q(tray__isnull=True) | Q(health=GpuHealth.UNHEALTHY) | Q(mig_mode=MigMode.ENABLED)
    )
    in_trays_not_up = Gpu.objects.filter(
        tray__in=ComputeTray.objects.exclude(state=TrayState.UP, mig_layout__in=WHOLE_GPU_LAYOUTS)
    )
    return Gpu.objects.filter(
        pk__in=trayless_or_unhealthy.order_by().values("pk").union(in_trays_not_up.order_by().values("pk"))
    )


def count_of(queryset: QuerySet) -> Subquery:
    """``(SELECT COUNT(*) ...)`` of `queryset`, for use inside another query's expressions."""
    # A Func, not Count: an aggregate annotation would add a GROUP BY (and no row at all when empty).
    counted = queryset.order_by().annotate(counted=Func(template="COUNT(*)", output_field=IntegerField()))
    return Subquery(counted.values("counted"), output_field=IntegerField())


def schedulable_gpus() -> int:
    """How many GPUs `schedulable_gpus_q` selects: all GPUs minus the unschedulable ones. One query."""
    return Gpu.objects.aggregate(n=Count("*") - count_of(unschedulable_gpus()))["n"]


@dataclass(frozen=True)
class CapacityStatus:
    capacity: int
    guaranteed: int
    affected: tuple[str, ...]  # departments whose guarantee cannot be met, lowest priority first

    @property
    def shortfall(self) -> int:
        return max(0, self.guaranteed - self.capacity)


def capacity_status(
    capacity: int | None = None, departments: list[Department] | None = None
) -> CapacityStatus:
    """Compare promised guarantees with the GPUs that can actually run work now.

    When failures shrink capacity below the guarantees, the departments that would go short are the lowest
    priority ones (then the largest guarantees, then by name), enough of them to cover the shortfall.

    A page that already has them passes `capacity` (`schedulable_gpus()`) and `departments` (all of them, in
    the database's name order, as `Department.objects.all()` returns them), and then this makes no query.
    """
    if capacity is None:
        capacity = schedulable_gpus()
    if departments is None:
        guarantees = list(
            Department.objects.filter(guaranteed_gpus__gt=0)
            .order_by("priority", "-guaranteed_gpus", "name")
            .values_list("name", "guaranteed_gpus")
        )
    else:
        # A stable sort of the name-ordered list: ties keep the database's name order (its collation).
        ordered = sorted(departments, key=lambda d: (d.priority, -d.guaranteed_gpus))
        guarantees = [(d.name, d.guaranteed_gpus) for d in ordered if d.guaranteed_gpus > 0]
    guaranteed = sum(gpus for _, gpus in guarantees)
    affected, missing = [], guaranteed - capacity
    for name, gpus in guarantees:
        if missing <= 0:
            break
        affected.append(name)
        missing -= gpus
    return CapacityStatus(capacity=capacity, guaranteed=guaranteed, affected=tuple(affected))


def dedicated_gpus(department: Department) -> int:
    return Gpu.objects.filter(tray__partition__dedication__department=department).count()


def _free(used: set[int], first: int, last: int, what: str) -> int:
    for value in range(first, last + 1):
        if value not in used:
            return value
    raise ValidationError(
        _("the %(what)s pool %(first)s-%(last)s is exhausted: widen it in the tenancy settings")
        % {"what": what, "first": first, "last": last}
    )


def _free_network(pools: TenancySettings, used: set[str]) -> str:
    supernet = ipaddress.ip_network(pools.tenant_supernet)
    taken = [ipaddress.ip_network(cidr) for cidr in used]
    for subnet in supernet.subnets(new_prefix=pools.tenant_prefix):
        if not any(subnet.overlaps(other) for other in taken):
            return str(subnet)
    raise ValidationError(
        _("no free /%(prefix)s network left in %(supernet)s: widen the tenant supernet")
        % {"prefix": pools.tenant_prefix, "supernet": supernet}
    )


def _allocate_isolation(department: Department, pools: TenancySettings) -> None:
    others = Department.objects.exclude(pk=department.pk)
    if not department.vlan_id:
        department.vlan_id = _free(
            set(others.values_list("vlan_id", flat=True)), pools.vlan_first, pools.vlan_last, "VLAN"
        )
    if not department.vxlan_vni:
        department.vxlan_vni = _free(
            set(others.values_list("vxlan_vni", flat=True)), pools.vni_first, pools.vni_last, "VXLAN VNI"
        )
    if not department.ib_pkey:
        department.ib_pkey = _free(
            set(others.values_list("ib_pkey", flat=True)),
            pools.pkey_first,
            pools.pkey_last,
            _("InfiniBand P_Key"),
        )
    if not department.network_cidr:
        department.network_cidr = _free_network(pools, set(others.values_list("network_cidr", flat=True)))
    if not department.export_path:
        department.export_path = naming.export_path(pools.export_root, department.slug)
    if not department.storage_quota_gib:
        department.storage_quota_gib = pools.default_storage_quota_gib


def _validate_isolation(department: Department) -> None:
    errors = {}
    others = Department.objects.exclude(pk=department.pk)
    for field, low, high, label in (
        ("vlan_id", VLAN_MIN, VLAN_MAX, "VLAN ID"),
        ("vxlan_vni", VNI_MIN, VNI_MAX, "VXLAN VNI"),
        ("ib_pkey", PKEY_MIN, PKEY_MAX, _("InfiniBand P_Key")),
    ):
        value = getattr(department, field)
        if not low <= value <= high:
            errors[field] = _("%(label)s %(value)s is outside %(low)s-%(high)s") % {
                "label": label,
                "value": value,
                "low": low,
                "high": high,
            }
        elif (owner := others.filter(**{field: value}).first()) is not None:
            errors[field] = _("%(label)s %(value)s is already assigned to %(owner)s") % {
                "label": label,
                "value": value,
                "owner": owner.name,
            }
    try:
        network = ipaddress.ip_network(department.network_cidr, strict=True)
    except ValueError as error:
        errors["network_cidr"] = _("not a network address: %(error)s") % {"error": error}
    else:
        for other in others.only("name", "network_cidr"):
            if networks_overlap(network, ipaddress.ip_network(other.network_cidr)):
                errors["network_cidr"] = _("%(network)s overlaps %(other)s's network %(other_network)s") % {
                    "network": network,
                    "other": other.name,
                    "other_network": other.network_cidr,
                }
                break
    if not department.export_path.startswith("/"):
        errors["export_path"] = _("the export path must be absolute")
    else:
        path = department.export_path.rstrip("/") + "/"
        for other in others.only("name", "export_path"):
            theirs = other.export_path.rstrip("/") + "/"
            if path.startswith(theirs) or theirs.startswith(path):
                errors["export_path"] = _("%(path)s overlaps %(other)s's export %(other_path)s") % {
                    "path": department.export_path,
                    "other": other.name,
                    "other_path": other.export_path,
                }
                break
    if errors:
        raise ValidationError(errors)


@transaction.atomic
def save_department(department: Department) -> Department:
    """Validate and save a new or changed department; allocate its isolation resources when empty; a new
    department gets its default project (tenancy.projects.ensure_default_project).

    Raises ValidationError naming the field: a limit below the guarantee, guarantees exceeding the
    schedulable healthy GPUs (with the shortfall), a guarantee below its dedicated partitions' GPUs, or an
    isolation value that is out of range or already someone else's.
    """
    if (why := naming.slug_error(department.slug)) is not None:  # every derived name needs a valid slug
        raise ValidationError({"slug": why})
    pools = TenancySettings.objects.select_for_update().get(pk=TenancySettings.load().pk)
    _allocate_isolation(department, pools)
    check_department_guarantee(department)  # not below its projects' guarantees (locks its row)
    if department.limit_gpus is not None and department.limit_gpus < department.guaranteed_gpus:
        raise ValidationError(
            {
                "limit_gpus": _("the limit (%(limit)s) may not be below the guarantee (%(guarantee)s)")
                % {"limit": department.limit_gpus, "guarantee": department.guaranteed_gpus}
            }
        )
    others = (
        Department.objects.exclude(pk=department.pk).aggregate(total=Sum("guaranteed_gpus"))["total"] or 0
    )
    capacity = schedulable_gpus()
    previous = (
        Department.objects.filter(pk=department.pk).values_list("guaranteed_gpus", flat=True).first() or 0
    )
    promised = others + department.guaranteed_gpus
    # Lowering a guarantee is always allowed, even while failures have capacity below the promises.
    if promised > capacity and department.guaranteed_gpus > previous:
        raise ValidationError(
            {
                "guaranteed_gpus": _(
                    "guarantees would total %(promised)s GPUs but only %(capacity)s schedulable healthy GPUs "
                    "exist: %(short)s short (%(others)s already guaranteed to other departments)"
                )
                % {"promised": promised, "capacity": capacity, "short": promised - capacity, "others": others}
            }
        )
    if department.pk and (owned := dedicated_gpus(department)) > department.guaranteed_gpus:
        raise ValidationError(
            {
                "guaranteed_gpus": _(
                    "its dedicated NVLink partitions hold %(owned)s GPUs; the guarantee must cover them"
                )
                % {"owned": owned}
            }
        )
    taken = {
        field: [TAKEN[field]]
        for field in ("name", "slug")
        if Department.objects.exclude(pk=department.pk).filter(**{field: getattr(department, field)}).exists()
    }
    try:
        _validate_isolation(department)
    except ValidationError as error:
        problems = error.message_dict
    else:
        problems = {}
    if "slug" in taken:
        problems.pop("export_path", None)  # derived from the slug: the slug is the problem
    if taken or problems:
        raise ValidationError({**problems, **taken})
    department.full_clean()
    department.save()
    ensure_default_project(department)  # from its creation on (tenancy.projects): in this transaction
    return department


@transaction.atomic
def dedicate_partition(department: Department, partition) -> DedicatedPartition:
    """Give an NVLink partition to a department as a dedicated service tier (counted in its guarantee)."""
    department = Department.objects.select_for_update().get(pk=department.pk)
    existing = DedicatedPartition.objects.filter(partition=partition).select_related("department").first()
    if existing and existing.department_id != department.pk:
        raise ValidationError(
            _("%(partition)s is already dedicated to %(department)s")
            % {"partition": partition, "department": existing.department.name}
        )
    gpus = dedicated_gpus(department) + (0 if existing else partition.trays.aggregate(n=Count("gpus"))["n"])
    if gpus > department.guaranteed_gpus:
        raise ValidationError(
            _(
                "%(department)s's dedicated partitions would hold %(gpus)s GPUs, more than its guarantee of "
                "%(guarantee)s: raise the guarantee first"
            )
            % {"department": department.name, "gpus": gpus, "guarantee": department.guaranteed_gpus}
        )
    return existing or DedicatedPartition.objects.create(department=department, partition=partition)


def _may_add(by, user, department: Department) -> bool:
    """Whether `by` may give `user` a role in `department`: an admin (or a trusted caller, None) anyone; a
    lead an active account that is not a platform admin, or someone already in the department."""
    if by is None or is_admin(by):
        return True
    if Membership.objects.filter(user=user, department=department).exists():
        return True
    return user.is_active and not is_admin(user)


INVITE_SEARCH_MIN = 3  # characters a people search needs
INVITE_SEARCH_MAX = 10  # accounts it answers at most


def invitable_users(department: Department, by, text: str) -> list:
    """Accounts `by` may invite into `department` whose username or name contains `text`: active, not yet
    members, and (for a lead) not platform admins, as `_may_add` allows. At most INVITE_SEARCH_MAX + 1 (the
    extra one says there are more); nothing for a text shorter than INVITE_SEARCH_MIN. The caller checks that
    `by` may manage the department: the answer is only ever about accounts that may be invited, so it tells
    nobody whether any other username exists."""
    text = text.strip()
    if len(text) < INVITE_SEARCH_MIN:
        return []
    users = (
        get_user_model()
        .objects.filter(is_active=True)
        .filter(Q(username__icontains=text) | Q(first_name__icontains=text) | Q(last_name__icontains=text))
        .exclude(pk__in=Membership.objects.filter(department=department).values("user_id"))
    )
    if by is not None and not is_admin(by):
        users = users.exclude(Q(is_staff=True) | Q(is_superuser=True))
    return list(users.order_by("username")[: INVITE_SEARCH_MAX + 1])


@transaction.atomic
def set_membership(
    department: Department,
    username: str,
    role: str,
    *,
    by=None,
    origin: str = RoleOrigin.MANUAL,
    keep_a_lead: bool = True,
) -> Membership:
    """Add a user to a department or change their role there.

    `by` is who asks (the portal and the API pass the signed-in user; None is a trusted caller such as the
    Django admin, which only platform admins open). A lead cannot add a platform admin, and an unknown,
    inactive or admin username gets the same answer, so that leads cannot probe which accounts exist.

    `origin` records where the role came from: by hand (the default: a change by hand makes any membership a
    hand grant, which sign-ins leave alone), or an identity provider's group (tenancy.identity, which also
    passes `keep_a_lead=False`: the provider's groups decide, even when that leaves a department without a
    lead).
    """
    if role not in Role.values:
        raise ValidationError(
            {"role": _("role must be one of %(roles)s") % {"roles": ", ".join(Role.values)}}
        )
    user = get_user_model().objects.filter(username=username).first()
    if user is None or not _may_add(by, user, department):
        if by is not None and not is_admin(by):
            message = _(
                "no user named %(username)s can be added to %(department)s: leads add active accounts that "
                "are not platform admins"
            )
        else:
            message = _("no user named %(username)s can be added to %(department)s")
        message %= {"username": repr(username), "department": department}
        raise ValidationError({"username": message})
    leads = Membership.objects.select_for_update().filter(department=department, role=Role.LEAD)
    if keep_a_lead and role != Role.LEAD and list(leads.values_list("user_id", flat=True)) == [user.pk]:
        raise ValidationError(
            {
                "role": _("%(user)s is the only lead of %(department)s: name another lead first")
                % {"user": user, "department": department}
            }
        )
    was_lead = Membership.objects.filter(user=user, department=department, role=Role.LEAD).exists()
    membership, _created = Membership.objects.update_or_create(
        user=user, department=department, defaults={"role": role, "origin": origin}
    )
    if was_lead and role != Role.LEAD:
        # No longer its lead: what only its leads hear (department-scoped subscriptions, their bell items)
        # goes now, in this transaction (core.notifications.subscriptions.forget_department).
        forget_department(user, department, still_member=True)
    return membership


@transaction.atomic
def remove_membership(membership: Membership, *, keep_a_lead: bool = True) -> None:
    """Remove a membership; refused for a department's only lead unless `keep_a_lead` is False (an identity
    provider's group that no longer holds them, tenancy.identity)."""
    leads = Membership.objects.select_for_update().filter(department=membership.department_id, role=Role.LEAD)
    # The lead rows locked and read (count() would neither lock nor wait): a lead removing another lead
    # waits for a concurrent removal or demotion, then sees the leads that are left.
    lead_users = list(leads.values_list("user_id", flat=True))
    if keep_a_lead and lead_users == [membership.user_id]:
        raise ValidationError(
            _("%(user)s is the only lead of %(department)s: name another first")
            % {"user": membership.user, "department": membership.department}
        )
    forget_department_member(membership)  # they leave its projects too
    membership.delete()
    # Leaving revokes at once, whichever door removed them (the pages, the API, the admin, an identity
    # provider's sync): their subscriptions and bell items about the department go in this transaction.
    forget_department(membership.user, membership.department, still_member=False)
