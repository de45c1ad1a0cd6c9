"""How people's accounts are mapped: identity providers' groups to roles (GroupRoleRule), providers' users
to accounts (ExternalIdentity), and each person's POSIX identity (PosixAccount) their jobs run as."""

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from core import posix
from core.text import TextValidator
from tenancy.choices import GrantedRole, IdentityProvider, PosixSource
from tenancy.i18n import english
from tenancy.models.departments import Department
from tenancy.models.projects import Project


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
        help_text=gettext_lazy(
            "The group's name exactly as the identity provider sends it (OpenID Connect: an entry of the "
            "groups claim; LDAP: the group's cn), prefix included."
        ),
        verbose_name=gettext_lazy("group"),
    )
    role = models.CharField(max_length=20, choices=GrantedRole.choices, verbose_name=gettext_lazy("role"))
    department = models.ForeignKey(
        Department,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="group_rules",
        help_text=gettext_lazy("For a lead or member role: the department. Empty for platform admin."),
        verbose_name=gettext_lazy("department"),
    )
    project = models.ForeignKey(
        Project,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="group_rules",
        help_text=gettext_lazy(
            "Optional, for a lead or member role: one of the department's projects. The group then makes its "
            "people the project's leads or members (and members of the department)."
        ),
        verbose_name=gettext_lazy("project"),
    )
    description = models.CharField(
        max_length=200, blank=True, validators=[TextValidator()], verbose_name=gettext_lazy("description")
    )
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=gettext_lazy("created at"))

    class Meta:
        verbose_name = gettext_lazy("group role rule")
        verbose_name_plural = gettext_lazy("group role rules")
        ordering = ["group", "role", "department__name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(role=GrantedRole.PLATFORM_ADMIN, department__isnull=True)
                | Q(role__in=[GrantedRole.LEAD, GrantedRole.MEMBER], department__isnull=False),
                name="%(app_label)s_%(class)s_scope_fits_role",
                violation_error_message=gettext_lazy(
                    "A platform admin rule names no department; a lead or member rule names one."
                ),
            ),
            models.CheckConstraint(
                condition=Q(project__isnull=True) | Q(department__isnull=False),
                name="%(app_label)s_%(class)s_project_rule_names_department",
                violation_error_message=gettext_lazy("A project rule names the project's department too."),
            ),
            models.UniqueConstraint(
                fields=["group", "project"],
                condition=Q(project__isnull=False),
                name="%(app_label)s_%(class)s_one_role_per_project",
                violation_error_message=gettext_lazy(
                    "This group already has a rule for this project: change that rule."
                ),
            ),
            models.UniqueConstraint(
                fields=["group", "department"],
                condition=Q(department__isnull=False, project__isnull=True),
                name="%(app_label)s_%(class)s_one_role_per_department",
                violation_error_message=gettext_lazy(
                    "This group already has a rule for this department: change that rule."
                ),
            ),
            models.UniqueConstraint(
                fields=["group"],
                condition=Q(role=GrantedRole.PLATFORM_ADMIN),
                name="%(app_label)s_%(class)s_one_admin_rule",
                violation_error_message=gettext_lazy("This group already makes its members platform admins."),
            ),
        ]

    def __str__(self):
        if self.role == GrantedRole.PLATFORM_ADMIN:
            return f"{self.group} -> platform admin"
        if self.project_id is not None:
            return f"{self.group} -> project {self.role} of {self.project}"
        return f"{self.group} -> {english(self.get_role_display).lower()} of {self.department}"

    def clean(self):
        super().clean()
        if self.project_id is not None and self.project.department_id != self.department_id:
            raise ValidationError(
                {
                    "project": (
                        _(
                            "%(project)s is not a project of %(department)s: choose one of the department's "
                            "projects, or that project's department."
                        )
                        if self.department
                        else _(
                            "%(project)s is not a project of no department: choose one of the department's "
                            "projects, or that project's department."
                        )
                    )
                    % {"project": self.project, "department": self.department}
                }
            )


class ExternalIdentity(models.Model):
    """An identity provider's user and the Rackplane account they sign in as (made at their first sign-in,
    or linked to an existing account by a platform admin in the Django admin).

    Accounts are matched by the provider's stable identifier (OpenID Connect `sub`, the LDAP entry's DN),
    never by a username or e-mail an identity provider could hand to someone else.
    """

    provider = models.CharField(
        max_length=10, choices=IdentityProvider.choices, verbose_name=gettext_lazy("provider")
    )
    subject = models.CharField(
        max_length=255,
        help_text=gettext_lazy("OpenID Connect: the `sub` claim. LDAP: the user's DN (lower case)."),
        verbose_name=gettext_lazy("subject"),
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="external_identities",
        verbose_name=gettext_lazy("user"),
    )
    granted_admin = models.BooleanField(
        default=False,
        help_text=gettext_lazy(
            "The account is a platform admin because of this provider's group (removed with the group)."
        ),
        verbose_name=gettext_lazy("granted admin"),
    )
    groups = models.JSONField(
        default=list,
        blank=True,
        help_text=gettext_lazy("The groups (within the prefix) at the last sign-in."),
        verbose_name=gettext_lazy("groups"),
    )
    last_sign_in_at = models.DateTimeField(
        null=True, blank=True, verbose_name=gettext_lazy("last sign in at")
    )
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=gettext_lazy("created at"))

    class Meta:
        verbose_name = gettext_lazy("external identity")
        verbose_name_plural = gettext_lazy("external identities")
        ordering = ["provider", "subject"]
        constraints = [
            models.UniqueConstraint(
                fields=["provider", "subject"], name="%(app_label)s_%(class)s_unique_subject"
            ),
            models.UniqueConstraint(fields=["provider", "user"], name="%(app_label)s_%(class)s_one_per_user"),
        ]

    def __str__(self):
        return f"{english(self.get_provider_display)} {self.subject} -> {self.user}"


class PosixAccount(models.Model):
    """The Unix user a person's jobs run as (core.posix.PosixIdentity): their login name on the nodes, user
    and primary group ids and supplementary groups. Slurm jobs are submitted as `name` (slurmrestd
    impersonation); Kubernetes pods run as uid/gid with the groups as supplementalGroups.

    Without one a person cannot submit to a backend that runs work as its person (a Slurm target with
    slurmrestd, a Kubernetes cluster). A uid belongs to one person only, and so does a login name: two
    people sharing one could read each other's files and signal each other's processes.
    """

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="posix_account",
        verbose_name=gettext_lazy("user"),
    )
    name = models.CharField(
        gettext_lazy("login name"),
        max_length=32,
        help_text=gettext_lazy(
            "The person's user name on the nodes (LDAP uid): lower case letters, digits, _ . -"
        ),
    )
    uid = models.PositiveIntegerField(
        gettext_lazy("uid"), help_text=gettext_lazy("uidNumber: never 0 (root) or 65534 (nobody).")
    )
    gid = models.PositiveIntegerField(
        gettext_lazy("gid"), help_text=gettext_lazy("gidNumber of the primary group.")
    )
    groups = models.JSONField(
        gettext_lazy("supplementary group ids"),
        default=list,
        blank=True,
        help_text=gettext_lazy("A list of gid numbers (posixGroup gidNumbers), without the primary group."),
    )
    source = models.CharField(
        max_length=10,
        choices=PosixSource.choices,
        default=PosixSource.ADMIN,
        verbose_name=gettext_lazy("source"),
    )
    updated_at = models.DateTimeField(auto_now=True, verbose_name=gettext_lazy("updated at"))

    class Meta:
        verbose_name_plural = gettext_lazy("POSIX accounts")
        verbose_name = gettext_lazy("POSIX account")
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
            errors["name"] = _(
                "must be a POSIX user name: a lower case letter or _ first, then lower case letters, digits, "
                "_ . - (at most 32)"
            )
        elif self.name in posix.RESERVED_NAMES:
            # Slurm takes the uid from the node's user database by name: root's name would run as root.
            errors["name"] = _("%(name)s is a system account's name: a person's jobs never run as it") % {
                "name": self.name
            }
        for field in ("uid", "gid"):
            problem = posix.id_problem(getattr(self, field))
            if problem:
                errors[field] = f"{field} {problem}"
        groups = self.groups
        if not isinstance(groups, list):
            errors["groups"] = _("must be a list of group id numbers")
        else:
            for group in groups:
                problem = posix.id_problem(group)
                if problem:
                    errors["groups"] = _("group %(group)s: %(problem)s") % {
                        "group": repr(group),
                        "problem": problem,
                    }
                    break
        if errors:
            raise ValidationError(errors)
        self.groups = normalized_groups(groups, self.gid)
        taken = PosixAccount.objects.exclude(pk=self.pk)
        if taken.filter(uid=self.uid).exists():
            errors["uid"] = _("uid %(uid)s belongs to another person") % {"uid": self.uid}
        if taken.filter(name=self.name).exists():
            errors["name"] = _("login name %(name)s belongs to another person") % {"name": self.name}
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
