"""Configuration errors: what is wrong, in which file, at which line.

A configuration error is data as much as an exception. Parsing collects
them (one per broken object, the object is skipped and parsing goes on) so
that a tenant keeps every good object, a broken branch can be reported
without losing the rest, and a change whose config is broken gets the
message as its result. Freezing a job graph raises them.

``str(error)`` is the one-line message users see::

    zuul.yaml:12: project 'app': job 'unit' is not defined

The project and branch that hold the file are kept beside it
(:attr:`ConfigError.project`, :attr:`ConfigError.branch`) and prefixed by
:meth:`ConfigError.describe`.
"""

from __future__ import annotations

from typing import Any

from scheduler.errors import SluiceError


class ConfigError(SluiceError):
    """One problem in tenant or project configuration."""

    def __init__(
        self,
        message: str,
        *,
        path: str = "",
        line: int | None = None,
        subject: str = "",
        project: str = "",
        branch: str = "",
    ) -> None:
        self.message = message
        self.path = path
        self.line = line
        self.subject = subject
        self.project = project
        self.branch = branch
        super().__init__(self.text())

    def text(self) -> str:
        where = self.path
        if where and self.line is not None:
            where = f"{where}:{self.line}"
        parts = [p for p in (where, self.subject, self.message) if p]
        return ": ".join(parts)

    def __str__(self) -> str:
        return self.text()

    def describe(self) -> str:
        """The message prefixed with ``project@branch`` when known."""
        if self.project:
            at = f"{self.project}@{self.branch}" if self.branch else self.project
            return f"{at}: {self.text()}"
        return self.text()

    def key(self) -> tuple[str, str, str, str, str]:
        """Identity without the line, to compare errors across edits."""
        return (self.project, self.branch, self.path, self.subject, self.message)

    def to_dict(self) -> dict[str, Any]:
        return {
            "project": self.project,
            "branch": self.branch,
            "path": self.path,
            "line": self.line,
            "subject": self.subject,
            "message": self.message,
        }

    def located(self, **where: Any) -> ConfigError:
        """A copy with missing location fields filled in from ``where``."""
        fields = self.to_dict()
        for key, value in where.items():
            if not fields.get(key):
                fields[key] = value
        return type(self)(
            fields["message"],
            path=fields["path"],
            line=fields["line"],
            subject=fields["subject"],
            project=fields["project"],
            branch=fields["branch"],
        )


class YamlError(ConfigError):
    """The text is not acceptable YAML (syntax, duplicate key, alias bomb)."""


class FreezeError(ConfigError):
    """A job or job graph cannot be frozen for an item."""


class NotPermittedError(FreezeError):
    """A job may not run for this item (post-review, allowed-projects): not a config error.

    Zuul decides this when it freezes an item's jobs, so the layout's load
    does not report it; the item that would run the job reports it.
    """
