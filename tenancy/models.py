"""Departments (tenants): guaranteed GPU quotas, over-quota borrowing, roles, network and storage isolation.

Quota semantics follow Run:ai/KAI (see tenancy.quota): a department always gets min(guarantee, demand),
may borrow idle GPUs beyond its guarantee up to its limit (preemptible), shared by over-quota weight.
"""

from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Lower

from core import posix
from core.access import (
    Role,
    is_admin,
    is_signed_in,
    led_department_ids,
    member_department_ids,
    member_project_ids,
)
from core.destinations import check_outbound_url
from core.text import TextValidator
from inventory.models import NVLinkPartition
from tenancy import naming
from tenancy.renderers import export_path_problem, is_inside
from tenancy.validators import validate_export_path, validate_export_root, validate_nfs_server

VLAN_MIN, VLAN_MAX = 1, 4094
VNI_MIN, VNI_MAX = 1, 16_777_215
PKEY_MIN, PKEY_MAX = 0x0001, 0x7FFE


class DepartmentQuerySet(models.QuerySet):
    def visible_to(self, user):
        if is_admin(user):
            return self
        return self.filter(pk__in=member_department_ids(user))

    def led_by(self, user):
        if is_admin(user):
            return self
        return self.filter(pk__in=led_department_ids(user))


def validate_department_slug(value):
    """A department's slug: every name derived from it is valid for its consumer (tenancy.naming)."""
    if (why := naming.slug_error(value)) is not None:
        raise ValidationError(why, code="invalid_slug")


def validate_project_slug(value):
    """A project's slug: with its department's, a valid and unique namespace and account (tenancy.naming)."""
    if (why := naming.slug_error(value, department=False)) is not None:
        raise ValidationError(why, code="invalid_slug")


# The same rules as database constraints (a row written around the models still cannot hold a bad slug).
_SLUG_FORM = Q(slug__regex=naming.SLUG_PATTERN)


class Department(models.Model):
    name = models.CharField(max_length=100, validators=[TextValidator()])  # one line of plain text
    slug = models.SlugField(
        max_length=naming.SLUG_MAX,
        validators=[validate_department_slug],
        help_text="Its Kubernetes namespace, Slurm account and QOS (tenancy.naming): up to "
        f"{naming.SLUG_MAX} lower-case letters, digits and single hyphens, starting with a letter.",
    )
    guaranteed_gpus = models.PositiveIntegerField(default=0, help_text="Always available; reclaimed if lent.")
    over_quota_weight = models.DecimalField(
        max_digits=6,
        decimal_places=2,
        default=Decimal("1.00"),
        validators=[MinValueValidator(Decimal("0"))],
        help_text="Share of idle GPUs it may borrow, relative to other departments (0: never borrows).",
    )
    limit_gpus = models.PositiveIntegerField(
        null=True, blank=True, help_text="Most GPUs it may hold, borrowing included; empty for no limit."
    )
    priority = models.SmallIntegerField(
        default=0, help_text="Higher priority is served first when borrowing."
    )
    # Network isolation, allocated from the pools in TenancySettings; unique while assigned.
    vlan_id = models.PositiveIntegerField(
        validators=[MinValueValidator(VLAN_MIN), MaxValueValidator(VLAN_MAX)]
    )
    vxlan_vni = models.PositiveIntegerField(
        validators=[MinValueValidator(VNI_MIN), MaxValueValidator(VNI_MAX)]
    )
    ib_pkey = models.PositiveIntegerField(
        validators=[MinValueValidator(PKEY_MIN), MaxValueValidator(PKEY_MAX)], help_text="InfiniBand P_Key"
    )
    network_cidr = models.CharField(
        max_length=43, help_text="The department's tenant network, e.g. 10.64.3.0/24"
    )
    # Storage isolation. Written unquoted into /etc/exports and PersistentVolumes (docs/rendering.md).
    export_path = models.CharField(
        max_length=255,
        validators=[validate_export_path],
        help_text="Absolute path of the department's NFS export, inside the tenancy settings' export root: "
        "letters, digits, '.', '_' and '-' between '/', no trailing '/'.",
    )
    storage_quota_gib = models.PositiveIntegerField(default=10240)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = DepartmentQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["name"], name="%(app_label)s_%(class)s_unique_name"),
            models.UniqueConstraint(fields=["slug"], name="%(app_label)s_%(class)s_unique_slug"),
            models.UniqueConstraint(fields=["vlan_id"], name="%(app_label)s_%(class)s_unique_vlan"),
            models.UniqueConstraint(fields=["vxlan_vni"], name="%(app_label)s_%(class)s_unique_vni"),
            models.UniqueConstraint(fields=["ib_pkey"], name="%(app_label)s_%(class)s_unique_pkey"),
            models.UniqueConstraint(fields=["network_cidr"], name="%(app_label)s_%(class)s_unique_cidr"),
            models.UniqueConstraint(fields=["export_path"], name="%(app_label)s_%(class)s_unique_export"),
            models.CheckConstraint(
                condition=_SLUG_FORM,
                name="%(app_label)s_%(class)s_slug_form",
                violation_error_message="A department's slug is lower-case letters, digits and single "
                "hyphens, starting with a letter and ending with a letter or digit.",
            ),
            models.CheckConstraint(
                condition=~Q(slug__in=sorted(naming.RESERVED_SLUGS))
                & ~Q(slug__startswith=naming.RESERVED_PREFIXES[0]),
                name="%(app_label)s_%(class)s_slug_not_reserved",
                violation_error_message="This slug is reserved (Kubernetes, Slurm or Rackplane use the "
                "name).",
            ),
            models.CheckConstraint(
                condition=Q(limit_gpus__isnull=True) | Q(limit_gpus__gte=F("guaranteed_gpus")),
                name="%(app_label)s_%(class)s_limit_not_below_guarantee",
                violation_error_message="A department's limit may not be below its guarantee.",
            ),
            models.CheckConstraint(
                condition=Q(over_quota_weight__gte=0), name="%(app_label)s_%(class)s_weight_not_negative"
            ),
            models.CheckConstraint(
                condition=Q(vlan_id__gte=VLAN_MIN, vlan_id__lte=VLAN_MAX),
                name="%(app_label)s_%(class)s_vlan_range",
            ),
            models.CheckConstraint(
                condition=Q(vxlan_vni__gte=VNI_MIN, vxlan_vni__lte=VNI_MAX),
                name="%(app_label)s_%(class)s_vni_range",
            ),
            models.CheckConstraint(
                condition=Q(ib_pkey__gte=PKEY_MIN, ib_pkey__lte=PKEY_MAX),
                name="%(app_label)s_%(class)s_pkey_range",
            ),
        ]

    def __str__(self):
        return self.name

    @property
    def pkey_hex(self) -> str:
        return f"0x{self.ib_pkey:04x}"

    def clean(self):
        super().clean()
        self._clean_export_path()

    def _clean_export_path(self) -> None:
        """Storage isolation: the export lies inside the export root and neither inside another
        department's export nor around one (either would let one department mount the other's data).
        The same path twice is the `unique_export` constraint's. A malformed path is its validator's."""
        path = self.export_path
        if not path or export_path_problem(path):
            return
        root = TenancySettings.load().export_root
        if problem := export_path_problem(path, root=root):
            raise ValidationError({"export_path": f"The export path {path!r} {problem}."})
        others = Department.objects.exclude(pk=self.pk)
        ancestors = ["/".join(path.split("/")[:i]) for i in range(2, path.count("/") + 1)]
        outer = others.filter(export_path__in=ancestors).order_by("export_path").first()
        inner = others.filter(export_path__startswith=path + "/").order_by("export_path").first()
        if outer is not None:
            raise ValidationError(
                {
                    "export_path": f"The export path {path} lies inside {outer.name}'s export "
                    f"{outer.export_path}: {outer.name} could read its data. Choose a path outside it."
                }
            )
        if inner is not None:
            raise ValidationError(
                {
                    "export_path": f"The export path {path} holds {inner.name}'s export {inner.export_path}: "
                    f"this department could read {inner.name}'s data. Choose a path outside it."
                }
            )


class RoleOrigin(models.TextChoices):
    """Where a membership (or a platform admin's flag) came from: granted by hand, or by an identity
    provider's group through a GroupRoleRule. Sign-ins re-sync only what their own provider granted."""

    MANUAL = "manual", "Granted by hand"
    OIDC = "oidc", "OpenID Connect group"
    LDAP = "ldap", "LDAP group"


class IdentityProvider(models.TextChoices):
    OIDC = RoleOrigin.OIDC.value, "OpenID Connect"
    LDAP = RoleOrigin.LDAP.value, "LDAP"


class MembershipRuleQuerySet(models.QuerySet):
    """The one visibility rule of a person's place in a department or a project: admins see all; a
    department's leads see its members (and its projects' members); anyone else sees their own."""

    department_id_path = "department_id"  # the lookup from the row to its department

    def visible_to(self, user):
        if is_admin(user):
            return self
        if not is_signed_in(user):
            return self.none()
        return self.filter(Q(**{f"{self.department_id_path}__in": led_department_ids(user)}) | Q(user=user))


class MembershipQuerySet(MembershipRuleQuerySet):
    department_id_path = "department_id"


class MembershipBase(models.Model):
    """What a department Membership and a ProjectMembership share: where the role came from, when it was
    granted, and how it reads. Each keeps its own user, scope and role fields (their related names and
    choices differ) and its own `unique_member` constraint (same name, its own scope). Abstract: no table,
    no migration."""

    origin = models.CharField(
        max_length=10,
        choices=RoleOrigin.choices,
        default=RoleOrigin.MANUAL,
        help_text="Granted by hand (stays until removed by hand), or by an identity provider's group "
        "(re-synced at each sign-in through it, removed when the group is gone). A change by hand makes it "
        "a hand grant.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    scope_field = "department"  # the field naming what it is a membership of

    class Meta:
        abstract = True

    def __str__(self):
        return f"{self.user} ({self.get_role_display()}, {getattr(self, self.scope_field)})"


class Membership(MembershipBase):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    department = models.ForeignKey(Department, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)

    objects = MembershipQuerySet.as_manager()

    class Meta:
        ordering = ["department__name", "role", "user__username"]
        constraints = [
            models.UniqueConstraint(
                fields=["user", "department"], name="%(app_label)s_%(class)s_unique_member"
            ),
        ]


PROJECT_SLUG_PATTERN = naming.SLUG_PATTERN  # with its department's: a DNS label and a Slurm account name


class ProjectQuerySet(models.QuerySet):
    def visible_to(self, user):
        """Admins: all; a department's leads: its projects; anyone else: the projects they are in."""
        if is_admin(user):
            return self
        if not is_signed_in(user):
            return self.none()
        return self.filter(
            Q(department_id__in=led_department_ids(user))
            | Q(pk__in=member_project_ids(user), department_id__in=member_department_ids(user))
        )

    def usable_by(self, user):
        """The projects `user` may submit jobs to: those it sees (core.access.may_use_project)."""
        return self.visible_to(user)


class Project(models.Model):
    """A team inside a department with its own share of the department's GPUs (Run:ai project, KAI leaf
    queue, Slurm child account, Kueue ClusterQueue in the department's Cohort).

    Quota fields mean what the department's mean, one level down (tenancy.quota.hierarchical_fair_share);
    the projects' guarantees fit inside the department's (tenancy.projects checks it under a lock on the
    department). A department without projects behaves as if it were its own single project.
    """

    department = models.ForeignKey(Department, on_delete=models.CASCADE, related_name="projects")
    name = models.CharField(max_length=100, validators=[TextValidator()])  # one line of plain text
    slug = models.SlugField(
        max_length=naming.SLUG_MAX,
        validators=[validate_project_slug],
        help_text=f"Up to {naming.SLUG_MAX} lower-case letters, digits and single hyphens, starting with a "
        "letter; with the department's slug, the Kubernetes namespace and Slurm account "
        "<department>--<project> (tenancy.naming).",
    )
    guaranteed_gpus = models.PositiveIntegerField(default=0, help_text="Always available; reclaimed if lent.")
    over_quota_weight = models.DecimalField(
        max_digits=6,
        decimal_places=2,
        default=Decimal("1.00"),
        validators=[MinValueValidator(Decimal("0"))],
        help_text="Share of the department's idle GPUs it may borrow, relative to its sibling projects.",
    )
    limit_gpus = models.PositiveIntegerField(
        null=True, blank=True, help_text="Most GPUs it may hold, borrowing included; empty for no limit."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = ProjectQuerySet.as_manager()

    class Meta:
        ordering = ["department__name", "name"]
        constraints = [
            models.UniqueConstraint(
                Lower("name"),
                "department",
                name="%(app_label)s_%(class)s_unique_name_per_department",
                violation_error_message="The department already has a project of this name.",
            ),
            models.UniqueConstraint(
                fields=["department", "slug"],
                name="%(app_label)s_%(class)s_unique_slug_per_department",
                violation_error_message="The department already has a project with this slug.",
            ),
            models.CheckConstraint(
                condition=_SLUG_FORM,
                name="%(app_label)s_%(class)s_slug_form",
                violation_error_message="A project's slug is lower-case letters, digits and single hyphens, "
                "starting with a letter and ending with a letter or digit.",
            ),
            models.CheckConstraint(
                condition=Q(limit_gpus__isnull=True) | Q(limit_gpus__gte=F("guaranteed_gpus")),
                name="%(app_label)s_%(class)s_limit_not_below_guarantee",
                violation_error_message="A project's limit may not be below its guarantee.",
            ),
            models.CheckConstraint(
                condition=Q(over_quota_weight__gte=0), name="%(app_label)s_%(class)s_weight_not_negative"
            ),
        ]

    def __str__(self):
        return f"{self.department} / {self.name}"

    @property
    def namespace(self) -> str:
        """Its Kubernetes namespace (and Kueue LocalQueue's): <department slug>--<project slug>."""
        return naming.project_namespace(self.department.slug, self.slug)

    @property
    def account(self) -> str:
        """Its Slurm account, a child of the department's account: <department slug>--<project slug>."""
        return naming.project_account(self.department.slug, self.slug)


class ProjectRole(models.TextChoices):
    LEAD = "lead", "Project lead"
    MEMBER = "member", "Project member"


class ProjectMembershipQuerySet(MembershipRuleQuerySet):
    department_id_path = "project__department_id"


class ProjectMembership(MembershipBase):
    """A department member's place in one of the department's projects (a person may be in several, as
    in Run:ai); the department Membership stays the one record of their department role. Removing the
    department membership removes these (tenancy.projects)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="project_memberships"
    )
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=ProjectRole.choices, default=ProjectRole.MEMBER)

    objects = ProjectMembershipQuerySet.as_manager()
    scope_field = "project"

    class Meta:
        ordering = ["project__name", "role", "user__username"]
        constraints = [
            models.UniqueConstraint(fields=["user", "project"], name="%(app_label)s_%(class)s_unique_member"),
        ]

    @property
    def department_id(self) -> int:
        """Its project's department (the audit files its changes under it)."""
        return self.project.department_id


class GrantedRole(models.TextChoices):
    PLATFORM_ADMIN = "platform_admin", "Platform admin"
    LEAD = Role.LEAD.value, Role.LEAD.label
    MEMBER = Role.MEMBER.value, Role.MEMBER.label


class GroupRoleRule(models.Model):
    """An identity provider's group gives a role: platform admin, or lead or member of a department or of
    one of its projects.

    Applied at every sign-in through OpenID Connect or LDAP (tenancy.identity): a user in the group gets the
    role; when they are no longer in it, the role goes at their next sign-in, if it came from a rule. The
    rule's scope is the platform (platform admin: no department), one department (lead, member), or one
    project of that department (`project` set: project lead or member; the person also becomes a member of
    the department, since a project's people are its department's). The project must be one of the rule's
    department's (clean(), checked again by tenancy.identity before it applies a rule).
    """

    group = models.CharField(
        max_length=255,
        help_text="The group's name exactly as the identity provider sends it (OpenID Connect: an entry of "
        "the groups claim; LDAP: the group's cn), prefix included.",
    )
    role = models.CharField(max_length=20, choices=GrantedRole.choices)
    department = models.ForeignKey(
        Department,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="group_rules",
        help_text="For a lead or member role: the department. Empty for platform admin.",
    )
    project = models.ForeignKey(
        Project,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="group_rules",
        help_text="Optional, for a lead or member role: one of the department's projects. The group then "
        "makes its people the project's leads or members (and members of the department).",
    )
    description = models.CharField(max_length=200, blank=True, validators=[TextValidator()])
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["group", "role", "department__name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(role=GrantedRole.PLATFORM_ADMIN, department__isnull=True)
                | Q(role__in=[GrantedRole.LEAD, GrantedRole.MEMBER], department__isnull=False),
                name="%(app_label)s_%(class)s_scope_fits_role",
                violation_error_message="A platform admin rule names no department; a lead or member rule "
                "names one.",
            ),
            models.CheckConstraint(
                condition=Q(project__isnull=True) | Q(department__isnull=False),
                name="%(app_label)s_%(class)s_project_rule_names_department",
                violation_error_message="A project rule names the project's department too.",
            ),
            models.UniqueConstraint(
                fields=["group", "project"],
                condition=Q(project__isnull=False),
                name="%(app_label)s_%(class)s_one_role_per_project",
                violation_error_message="This group already has a rule for this project: change that rule.",
            ),
            models.UniqueConstraint(
                fields=["group", "department"],
                condition=Q(department__isnull=False, project__isnull=True),
                name="%(app_label)s_%(class)s_one_role_per_department",
                violation_error_message="This group already has a rule for this department: change that "
                "rule.",
            ),
            models.UniqueConstraint(
                fields=["group"],
                condition=Q(role=GrantedRole.PLATFORM_ADMIN),
                name="%(app_label)s_%(class)s_one_admin_rule",
                violation_error_message="This group already makes its members platform admins.",
            ),
        ]

    def __str__(self):
        if self.role == GrantedRole.PLATFORM_ADMIN:
            return f"{self.group} -> platform admin"
        if self.project_id is not None:
            return f"{self.group} -> project {self.role} of {self.project}"
        return f"{self.group} -> {self.get_role_display().lower()} of {self.department}"

    def clean(self):
        super().clean()
        if self.project_id is not None and self.project.department_id != self.department_id:
            raise ValidationError(
                {
                    "project": f"{self.project} is not a project of {self.department or 'no department'}: "
                    "choose one of the department's projects, or that project's department."
                }
            )


class ExternalIdentity(models.Model):
    """An identity provider's user and the Rackplane account they sign in as (made at their first sign-in,
    or linked to an existing account by a platform admin in the Django admin).

    Accounts are matched by the provider's stable identifier (OpenID Connect `sub`, the LDAP entry's DN),
    never by a username or e-mail an identity provider could hand to someone else.
    """

    provider = models.CharField(max_length=10, choices=IdentityProvider.choices)
    subject = models.CharField(
        max_length=255, help_text="OpenID Connect: the `sub` claim. LDAP: the user's DN (lower case)."
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="external_identities"
    )
    granted_admin = models.BooleanField(
        default=False,
        help_text="The account is a platform admin because of this provider's group (removed with the "
        "group).",
    )
    groups = models.JSONField(
        default=list, blank=True, help_text="The groups (within the prefix) at the last sign-in."
    )
    last_sign_in_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name_plural = "external identities"
        ordering = ["provider", "subject"]
        constraints = [
            models.UniqueConstraint(
                fields=["provider", "subject"], name="%(app_label)s_%(class)s_unique_subject"
            ),
            models.UniqueConstraint(fields=["provider", "user"], name="%(app_label)s_%(class)s_one_per_user"),
        ]

    def __str__(self):
        return f"{self.get_provider_display()} {self.subject} -> {self.user}"


class PosixSource(models.TextChoices):
    """Who set a person's POSIX identity. A provider's is refreshed at each sign-in through it; an
    administrator's mapping is never overwritten by a provider."""

    LDAP = RoleOrigin.LDAP.value, "LDAP (uidNumber, gidNumber, posixGroup)"
    OIDC = RoleOrigin.OIDC.value, "OpenID Connect claims"
    ADMIN = "admin", "Set by an administrator"


class PosixAccount(models.Model):
    """The Unix user a person's jobs run as (core.posix.PosixIdentity): their login name on the nodes, user
    and primary group ids and supplementary groups. Slurm jobs are submitted as `name` (slurmrestd
    impersonation); Kubernetes pods run as uid/gid with the groups as supplementalGroups.

    Without one a person cannot submit to a backend that runs work as its person (a Slurm target with
    slurmrestd, a Kubernetes cluster). A uid belongs to one person only, and so does a login name: two
    people sharing one could read each other's files and signal each other's processes.
    """

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="posix_account"
    )
    name = models.CharField(
        "login name",
        max_length=32,
        help_text="The person's user name on the nodes (LDAP uid): lower case letters, digits, _ . -",
    )
    uid = models.PositiveIntegerField("uid", help_text="uidNumber: never 0 (root) or 65534 (nobody).")
    gid = models.PositiveIntegerField("gid", help_text="gidNumber of the primary group.")
    groups = models.JSONField(
        "supplementary group ids",
        default=list,
        blank=True,
        help_text="A list of gid numbers (posixGroup gidNumbers), without the primary group.",
    )
    source = models.CharField(max_length=10, choices=PosixSource.choices, default=PosixSource.ADMIN)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "POSIX account"
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["uid"], name="%(app_label)s_%(class)s_unique_uid"),
            models.UniqueConstraint(fields=["name"], name="%(app_label)s_%(class)s_unique_name"),
            models.CheckConstraint(
                condition=Q(uid__gte=posix.MIN_ID, uid__lte=posix.MAX_ID)
                & ~Q(uid__in=sorted(posix.RESERVED_IDS)),
                name="%(app_label)s_%(class)s_uid_usable",
            ),
            models.CheckConstraint(
                condition=Q(gid__gte=posix.MIN_ID, gid__lte=posix.MAX_ID)
                & ~Q(gid__in=sorted(posix.RESERVED_IDS)),
                name="%(app_label)s_%(class)s_gid_usable",
            ),
        ]

    def __str__(self):
        return f"{self.name} ({self.uid}:{self.gid})"

    def clean(self):
        errors: dict[str, str] = {}
        if not posix.NAME_RE.fullmatch(self.name or ""):
            errors["name"] = (
                "must be a POSIX user name: a lower case letter or _ first, then lower case letters, digits, "
                "_ . - (at most 32)"
            )
        elif self.name in posix.RESERVED_NAMES:
            # Slurm takes the uid from the node's user database by name: root's name would run as root.
            errors["name"] = f"{self.name} is a system account's name: a person's jobs never run as it"
        for field in ("uid", "gid"):
            problem = posix.id_problem(getattr(self, field))
            if problem:
                errors[field] = f"{field} {problem}"
        groups = self.groups
        if not isinstance(groups, list):
            errors["groups"] = "must be a list of group id numbers"
        else:
            for group in groups:
                problem = posix.id_problem(group)
                if problem:
                    errors["groups"] = f"group {group!r}: {problem}"
                    break
        if errors:
            raise ValidationError(errors)
        self.groups = normalized_groups(groups, self.gid)
        taken = PosixAccount.objects.exclude(pk=self.pk)
        if taken.filter(uid=self.uid).exists():
            errors["uid"] = f"uid {self.uid} belongs to another person"
        if taken.filter(name=self.name).exists():
            errors["name"] = f"login name {self.name} belongs to another person"
        if errors:
            raise ValidationError(errors)

    def identity(self) -> posix.PosixIdentity:
        return posix.PosixIdentity(
            name=self.name, uid=self.uid, gid=self.gid, groups=tuple(normalized_groups(self.groups, self.gid))
        )


def normalized_groups(groups, gid: int) -> list[int]:
    """Supplementary group ids as PosixIdentity keeps them: sorted, no repeats, without the primary group."""
    return sorted({g for g in groups or [] if isinstance(g, int) and not isinstance(g, bool) and g != gid})


_READ = object()


def posix_identity_of(user, account=_READ) -> posix.PosixIdentity | None:
    """The POSIX identity `user`'s jobs run as, or None when they have none (or it is no longer valid).
    `account`: their PosixAccount (or None) as the caller loaded it with the user in one query
    (select_related("...__posix_account")); read now when not given."""
    if user is None or not getattr(user, "pk", None) or not getattr(user, "is_active", True):
        return None  # an inactive account is nobody: its queued jobs are refused at dispatch, not run as it
    if account is _READ:
        account = PosixAccount.objects.filter(user_id=user.pk).first()
    if account is None:
        return None
    try:
        return account.identity()
    except ValueError:
        return None


class DedicatedPartitionQuerySet(models.QuerySet):
    def visible_to(self, user):
        return self.filter(department__in=Department.objects.visible_to(user))


class DedicatedPartition(models.Model):
    """An NVLink partition given to one department as a dedicated service tier.

    Its GPUs count towards the department's guarantee and serve that department first.
    """

    partition = models.OneToOneField(NVLinkPartition, on_delete=models.CASCADE, related_name="dedication")
    department = models.ForeignKey(Department, on_delete=models.CASCADE, related_name="dedicated_partitions")
    created_at = models.DateTimeField(auto_now_add=True)

    objects = DedicatedPartitionQuerySet.as_manager()

    class Meta:
        ordering = ["department__name", "partition__rack__name", "partition__clique_id"]
        constraints = [
            models.UniqueConstraint(fields=["partition"], name="%(app_label)s_%(class)s_unique_partition"),
        ]

    def __str__(self):
        return f"{self.partition} -> {self.department}"


class TenancySettings(models.Model):
    """The pools isolation resources are allocated from, and telemetry knobs. One row (pk=1)."""

    vlan_first = models.PositiveIntegerField(default=100)
    vlan_last = models.PositiveIntegerField(default=3999)
    vni_first = models.PositiveIntegerField(default=10000)
    vni_last = models.PositiveIntegerField(default=19999)
    pkey_first = models.PositiveIntegerField(default=0x0100)
    pkey_last = models.PositiveIntegerField(default=0x7FFE)
    tenant_supernet = models.CharField(max_length=43, default="10.64.0.0/16")
    tenant_prefix = models.PositiveSmallIntegerField(
        default=24, help_text="Prefix length of each tenant network"
    )
    export_root = models.CharField(
        max_length=200,
        default="/exports/tenants",
        validators=[validate_export_root],
        help_text="Every department's export path lies inside it; a new department's is <root>/<slug>.",
    )
    nfs_server = models.CharField(
        max_length=253, default="nfs.storage.internal", validators=[validate_nfs_server]
    )
    default_storage_quota_gib = models.PositiveIntegerField(default=10240)
    idle_threshold_percent = models.FloatField(default=5.0)
    idle_window_minutes = models.PositiveIntegerField(default=30)
    utilization_history_hours = models.PositiveIntegerField(
        default=24, help_text="How long per-GPU utilization (5-minute buckets) is kept."
    )
    quota_history_days = models.PositiveIntegerField(
        default=30, help_text="How long department quota snapshots are kept."
    )

    class Meta:
        verbose_name = "tenancy settings"
        verbose_name_plural = "tenancy settings"
        constraints = [
            models.CheckConstraint(condition=Q(pk=1), name="%(app_label)s_%(class)s_singleton"),
            models.CheckConstraint(
                condition=Q(
                    vlan_first__gte=VLAN_MIN, vlan_last__lte=VLAN_MAX, vlan_first__lte=F("vlan_last")
                ),
                name="%(app_label)s_%(class)s_vlan_pool",
            ),
            models.CheckConstraint(
                condition=Q(vni_first__gte=VNI_MIN, vni_last__lte=VNI_MAX, vni_first__lte=F("vni_last")),
                name="%(app_label)s_%(class)s_vni_pool",
            ),
            models.CheckConstraint(
                condition=Q(
                    pkey_first__gte=PKEY_MIN, pkey_last__lte=PKEY_MAX, pkey_first__lte=F("pkey_last")
                ),
                name="%(app_label)s_%(class)s_pkey_pool",
            ),
        ]

    def __str__(self):
        return "Tenancy settings"

    def clean(self):
        super().clean()
        root = self.export_root
        if root and (root == "/" or not export_path_problem(root)):
            # A new root must still hold every department's export: the renderer refuses one outside it.
            outside = [
                d
                for d in Department.objects.only("name", "export_path")
                if not is_inside(d.export_path, root)
            ]
            if outside:
                listed = ", ".join(f"{d.name} ({d.export_path})" for d in outside[:5])
                raise ValidationError(
                    {
                        "export_root": f"{len(outside)} department export(s) would lie outside {root}: "
                        f"{listed}. Move them first, or choose a root that holds them."
                    }
                )

    @classmethod
    def load(cls) -> "TenancySettings":
        return cls.objects.get_or_create(pk=1)[0]


# --- Telemetry: GPU utilization from DCGM exporters, bounded history, department quota snapshots ---------


class MetricsSourceKind(models.TextChoices):
    DIRECT = "direct", "Direct: Rackplane scrapes the DCGM exporters (or nodes push)"
    PROMETHEUS = "prometheus", "The site's Prometheus-compatible query API"


class MetricsSource(models.Model):
    """Where GPU utilization comes from (tenancy.metrics_source). One row (pk=1).

    Direct: the exporter endpoints below are scraped into 5-minute buckets (small sites). Prometheus: the
    site's Prometheus (or Thanos, Mimir, VictoriaMetrics) is asked with PromQL; Rackplane keeps only the idle
    state it derives, no per-GPU history. The token and password are stored as given and never shown back.
    """

    kind = models.CharField(
        max_length=12, choices=MetricsSourceKind.choices, default=MetricsSourceKind.DIRECT
    )
    url = models.URLField(
        max_length=500,
        blank=True,
        help_text="The query API's base address, e.g. https://prometheus.example.org:9090 (Rackplane adds "
        "/api/v1/query); with a path prefix for Thanos, Mimir (/prometheus) or VictoriaMetrics.",
    )
    bearer_token = models.CharField(max_length=4096, blank=True, help_text="Sent as 'Authorization: Bearer'.")
    username = models.CharField(max_length=200, blank=True, help_text="HTTP basic authentication.")
    password = models.CharField(max_length=200, blank=True)
    ca_file = models.CharField(
        max_length=500,
        blank=True,
        help_text="Absolute path of the CA bundle (PEM) that signed the server's certificate; empty for the "
        "system's.",
    )
    timeout_seconds = models.PositiveSmallIntegerField(default=10)
    # The outbound guard (core.outbound, docs/outbound.md): the site's Prometheus is usually an internal
    # service, and only platform admins edit the source, so private and loopback addresses are allowed by
    # default; link-local (cloud metadata) ones never are, nor a redirect to another host.
    allow_private_address = models.BooleanField(
        default=True,
        help_text="The address may be a private or loopback one (an internal Prometheus). Link-local and "
        "metadata addresses are refused whatever this says.",
    )
    window_seconds = models.PositiveIntegerField(
        default=300,
        validators=[MinValueValidator(2)],
        help_text="Utilization is averaged over this window; a GPU with no sample in it has no data (never "
        "idle). At least twice the exporters' scrape interval.",
    )
    metric = models.CharField(max_length=200, default="DCGM_FI_DEV_GPU_UTIL")
    uuid_label = models.CharField(
        max_length=100, default="UUID", help_text="The label holding the GPU UUID (dcgm-exporter: UUID)."
    )
    gpu_label = models.CharField(max_length=100, default="gpu", help_text="The GPU index label.")
    hostname_label = models.CharField(max_length=100, default="Hostname", help_text="The node name label.")
    selector = models.CharField(
        max_length=500,
        blank=True,
        help_text='Extra label matchers for this site\'s exporters, e.g. cluster="gb-east",job="dcgm".',
    )
    last_polled_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    last_series_count = models.PositiveIntegerField(default=0)

    class Meta:
        verbose_name = "metrics source"
        verbose_name_plural = "metrics source"
        constraints = [
            models.CheckConstraint(condition=Q(pk=1), name="%(app_label)s_%(class)s_singleton"),
            models.CheckConstraint(
                condition=Q(kind="direct") | ~Q(url=""),
                name="%(app_label)s_%(class)s_prometheus_has_url",
                violation_error_message="A Prometheus source needs the query API's address.",
            ),
            models.CheckConstraint(
                condition=Q(bearer_token="") | (Q(username="") & Q(password="")),
                name="%(app_label)s_%(class)s_one_credential",
                violation_error_message="Give a bearer token or a user name and password, not both.",
            ),
        ]

    def __str__(self):
        return self.get_kind_display()

    @classmethod
    def load(cls) -> "MetricsSource":
        return cls.objects.get_or_create(pk=1)[0]

    @property
    def is_prometheus(self) -> bool:
        return self.kind == MetricsSourceKind.PROMETHEUS

    def clean(self):
        super().clean()
        if self.is_prometheus and self.url:
            try:
                check_outbound_url(self.url, allow_private_address=self.allow_private_address)
            except ValidationError as error:
                raise ValidationError({"url": error.messages}) from error


class ExporterEndpoint(models.Model):
    """A DCGM exporter's /metrics URL, scraped on the Celery beat schedule."""

    url = models.URLField(max_length=500)
    enabled = models.BooleanField(default=True)
    last_scraped_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    last_sample_count = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["url"]
        constraints = [models.UniqueConstraint(fields=["url"], name="%(app_label)s_%(class)s_unique_url")]

    def __str__(self):
        return self.url


class GpuActivity(models.Model):
    """The latest utilization of one GPU, and since when it has stayed under the idle threshold."""

    gpu = models.OneToOneField(
        "inventory.Gpu", on_delete=models.CASCADE, primary_key=True, related_name="activity"
    )
    utilization = models.FloatField(help_text="Percent, 0-100, latest sample")
    sampled_at = models.DateTimeField()
    low_since = models.DateTimeField(
        null=True, blank=True, help_text="Start of the current run of samples under the idle threshold."
    )

    class Meta:
        verbose_name_plural = "GPU activity"
        indexes = [models.Index(fields=["low_since"], name="tenancy_gpuactivity_low_idx")]

    def __str__(self):
        return f"GPU {self.gpu_id}: {self.utilization:.0f}% at {self.sampled_at:%H:%M}"


class GpuUtilization(models.Model):
    """Utilization of one GPU over a 5-minute bucket, hourly past a day (tenancy.activity.downsample_history);
    kept for utilization_history_hours, at most MAX_ROWS_PER_GPU rows per GPU. Direct source only."""

    BUCKET_SECONDS = 300

    gpu = models.ForeignKey("inventory.Gpu", on_delete=models.CASCADE, related_name="utilization_buckets")
    bucket_start = models.DateTimeField()
    mean = models.FloatField()
    peak = models.FloatField()
    samples = models.PositiveIntegerField(default=1)
    seconds = models.PositiveIntegerField(
        default=BUCKET_SECONDS, help_text="The bucket's length: 300, or 3600 once downsampled (past a day)."
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["gpu", "bucket_start"], name="%(app_label)s_%(class)s_unique_bucket"
            ),
        ]
        indexes = [models.Index(fields=["bucket_start"], name="tenancy_gpuutil_bucket_idx")]

    def __str__(self):
        return f"GPU {self.gpu_id} {self.bucket_start:%Y-%m-%d %H:%M}: {self.mean:.0f}%"


class QuotaSnapshotQuerySet(models.QuerySet):
    def visible_to(self, user):
        return self.filter(department__in=Department.objects.visible_to(user))


class QuotaSnapshot(models.Model):
    """A department's quota position at one moment; the dashboards' history (kept quota_history_days)."""

    department = models.ForeignKey(Department, on_delete=models.CASCADE, related_name="quota_snapshots")
    taken_at = models.DateTimeField()
    guaranteed = models.PositiveIntegerField()
    in_use = models.PositiveIntegerField()
    in_quota = models.PositiveIntegerField()
    borrowed = models.PositiveIntegerField()
    fair_share = models.PositiveIntegerField()
    pending_demand = models.PositiveIntegerField()
    idle = models.PositiveIntegerField()

    objects = QuotaSnapshotQuerySet.as_manager()

    class Meta:
        ordering = ["taken_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["department", "taken_at"], name="%(app_label)s_%(class)s_unique_time"
            ),
        ]
        indexes = [models.Index(fields=["taken_at"], name="tenancy_quotasnap_time_idx")]

    def __str__(self):
        return f"{self.department_id} at {self.taken_at:%Y-%m-%d %H:%M}: {self.in_use}/{self.guaranteed}"
