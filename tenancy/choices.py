from django.db import models


class Role(models.TextChoices):
    LEAD = "lead", "Department lead"
    MEMBER = "member", "Department member"
