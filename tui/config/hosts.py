"""hosts.yaml: the inventory of cluster hosts and how to reach them.

Pydantic does the type checking; `yamlfile` maps each error back to the file's line.
"""

from __future__ import annotations

import difflib
import ipaddress
import re
import sys
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails

from tui.config.listen import parse_listen
from tui.config.notify import NotifyOptions, NotifyTargets
from tui.config.stall import StallOptions
from tui.config.yamlfile import ConfigError, LocatedDoc, load_yaml, parse_yaml
from tui.state import check_cluster_name

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}\Z")
# Host names and IPv4 literals; nothing a shell or ssh option parser could misread.
_HOSTNAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,252}\Z")
_SCOPE_RE = re.compile(r"^[A-Za-z0-9_.-]{1,32}\Z")  # an IPv6 zone: an interface name or number
# A login name as POSIX and useradd have it (portable filename characters, not starting with
# '-', an optional trailing '$'), or a directory's fully qualified one (`first.last@corp.example`,
# SSSD): no ssh option parser can misread one, and fix lines quote it anyway.
_USER_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._@-]{0,63}\$?\Z")
# A path hosts.yaml names (identity_file, known_hosts, config): any characters a file name may
# have (they are quoted wherever shown) but no control characters, and bounded.
_PATH_BAD_RE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
MAX_PATH_CHARS = 4096
# How long a short command on a host (probe, lock, `ray stop`, status reads) may take to answer
# when hosts.yaml's ssh.command_timeout does not say: a stalled host (a hung NFS mount) is then
# reported instead of waited for forever.
DEFAULT_COMMAND_TIMEOUT = 30.0


def normalize_address(text: str) -> str | None:
    """A host name, an IPv4 literal or an IPv6 literal (`::1`, `fd00::5`, `fe80::1%eth0`, also
    in brackets as ssh writes them) → the bare form to connect to; None when it is none of
    these."""
    if _HOSTNAME_RE.match(text):
        return text
    bare = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    if ":" not in bare:
        return None
    addr, _, scope = bare.partition("%")
    if scope and not _SCOPE_RE.match(scope):
        return None
    try:
        ipaddress.IPv6Address(addr)
    except ValueError:
        return None
    return bare


def split_jump(spec: str) -> tuple[str | None, str, int | None]:
    """'user@host:port' → (user, host, port); `[v6]:port`, a bare IPv6 literal and a Host
    alias work too. ValueError when a part is not valid."""
    user, _, rest = spec.rpartition("@")
    host, port_text = rest, ""
    if rest.startswith("["):
        close = rest.find("]")
        after = rest[close + 1 :] if close >= 0 else ""
        if close < 0 or (after and not after.startswith(":")):
            raise ValueError("unbalanced '[' in the address")
        host, port_text = rest[1:close], rest[close + 2 :]
    elif rest.count(":") == 1:
        host, _, port_text = rest.partition(":")
    if user and not _USER_RE.match(user):
        raise ValueError(f"{user!r} is not a user name")
    address = normalize_address(host)
    if address is None:
        raise ValueError(f"{host!r} is not a host name or IP address")
    port = None
    if port_text:
        if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
            raise ValueError(f"{port_text!r} is not a port")
        port = int(port_text)
    return (user or None), address, port


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True)


class SshOptions(_Strict):
    """Connection settings; every field is optional so per-host blocks can override a few."""

    user: str | None = None
    port: int | None = Field(default=None, ge=1, le=65535)
    identity_file: str | None = None
    known_hosts: str | None = None
    jump: str | None = None
    config: str | None = Field(
        default=None, description="ssh_config file to read (default ~/.ssh/config)"
    )
    insecure_skip_host_key_check: bool | None = None
    connect_timeout: float | None = Field(default=None, gt=0, le=300)
    keepalive_interval: float | None = Field(default=None, gt=0, le=300)
    keepalive_count_max: int | None = Field(default=None, ge=1, le=100)
    command_timeout: float | None = Field(
        default=None,
        gt=0,
        le=3600,
        description="seconds a short command on the host may take to answer (default 30)",
    )

    @field_validator("user")
    @classmethod
    def _check_user(cls, v: str | None) -> str | None:
        if v is not None and not _USER_RE.match(v):
            raise ValueError(
                f"{v!r} is not a login name (letters, digits, '.', '_', '-', '@'; not "
                "starting with '-' or '@'; at most 64)"
            )
        return v

    @field_validator("port", mode="before")
    @classmethod
    def _check_port(cls, v: object) -> object:
        if isinstance(v, bool):  # YAML's yes/no/true would pass as 1/0
            raise ValueError("a port is a number 1-65535")
        return v

    @field_validator("identity_file", "known_hosts", "config")
    @classmethod
    def _check_path(cls, v: str | None) -> str | None:
        if v is not None and (len(v) > MAX_PATH_CHARS or _PATH_BAD_RE.search(v)):
            raise ValueError(f"a path of one line, at most {MAX_PATH_CHARS} characters")
        return v

    @field_validator("identity_file", "known_hosts")
    @classmethod
    def _not_empty(cls, v: str | None) -> str | None:
        if v is not None and not v:
            raise ValueError("an empty path (leave the key out for the default)")
        return v

    def merged(self, override: SshOptions | None) -> SshOptions:
        if override is None:
            return self
        data = self.model_dump()
        data.update({k: v for k, v in override.model_dump().items() if v is not None})
        return SshOptions(**data)


class TelemetryOptions(_Strict):
    interval: float = Field(default=1.0, ge=0.1, le=60, description="seconds between GPU samples")
    history: int = Field(default=300, ge=10, le=3600, description="samples kept per GPU")
    relay: Literal["auto", "on", "off"] = Field(
        default="auto",
        description="gather each group's agent lines on one of its hosts (auto: 64+ hosts)",
    )
    relay_group: int = Field(default=128, ge=2, le=1024, description="hosts per relay")

    @field_validator("relay", mode="before")
    @classmethod
    def _relay_words(cls, value: Any) -> Any:
        # YAML reads a bare on/off (also yes/no, true/false) as a boolean.
        return {True: "on", False: "off"}.get(value, value) if type(value) is bool else value


_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")


class RayOptions(_Strict):
    """How Ray is started on the hosts (verl-tui up)."""

    port: int = Field(default=6379, ge=1, le=65535, description="GCS port on the head")
    dashboard_port: int = Field(
        default=8265, ge=1, le=65535, description="dashboard/jobs API, bound to the head's loopback"
    )
    if TYPE_CHECKING:  # what _check_env stores: YAML numbers come in, strings are kept
        env: dict[str, str] = Field(default_factory=dict)
    else:
        env: dict[str, str | int | float] = Field(
            default_factory=dict, description="exported before `ray start` on every host"
        )
    num_cpus: int | None = Field(default=None, ge=1)
    memory: int | None = Field(default=None, ge=1, description="bytes, ray start --memory")
    object_store_memory: int | None = Field(
        default=None, ge=78643200, description="bytes, at least 75 MiB"
    )
    start_timeout: float = Field(default=120.0, gt=0, le=3600)

    @field_validator("env")
    @classmethod
    def _check_env(cls, v: dict[str, str | int | float]) -> dict[str, str]:
        for key, value in v.items():
            if not _ENV_NAME_RE.match(key):
                raise ValueError(f"{key!r} is not an environment variable name")
            if "\n" in str(value) or "\0" in str(value):
                raise ValueError(f"{key}: value must be one line")
        return {k: str(val) for k, val in v.items()}


# env_setup: shell steps run on the host before every command (conda, modules); bounded so a
# hosts file cannot turn every remote command line into megabytes.
MAX_SETUP_STEPS = 32
MAX_SETUP_CHARS = 4096
_SETUP_BAD_RE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")  # TAB, LF allowed
_CONTAINER_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\Z")
MAX_EXEC_WORDS = 64
_WORD_BAD_RE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _check_step(step: str) -> str:
    if len(step) > MAX_SETUP_CHARS:
        raise ValueError(f"longer than {MAX_SETUP_CHARS} characters")
    if _SETUP_BAD_RE.search(step):
        raise ValueError("contains a control character")
    return step


SetupStep = Annotated[str, AfterValidator(_check_step)]


def _setup_steps(v: object) -> object:
    """A string is one step; a list, each item one (checked as SetupStep, so an error names
    the item's line)."""
    if v is None or isinstance(v, str):
        return None if v is None else (v,)
    if not isinstance(v, (list, tuple)):
        raise ValueError("env_setup is a shell line or a list of shell lines")
    if len(v) > MAX_SETUP_STEPS:
        raise ValueError(f"at most {MAX_SETUP_STEPS} env_setup lines")
    return v


class ContainerSpec(_Strict):
    """Where a host's commands run: a named docker/podman container, an apptainer instance, or
    any runtime through `exec:` (an argv prefix that runs the rest inside it)."""

    runtime: Literal["docker", "podman", "apptainer"] | None = None
    name: str | None = None
    exec: tuple[str, ...] | None = Field(default=None, min_length=1, max_length=MAX_EXEC_WORDS)

    @field_validator("name")
    @classmethod
    def _check_name(cls, v: str | None) -> str | None:
        if v is not None and not _CONTAINER_NAME_RE.match(v):
            raise ValueError("container names use letters, digits, '_', '.' and '-' (max 128)")
        return v

    @field_validator("exec")
    @classmethod
    def _check_exec(cls, v: tuple[str, ...] | None) -> tuple[str, ...] | None:
        for word in v or ():
            if not word or len(word) > MAX_SETUP_CHARS or _WORD_BAD_RE.search(word):
                raise ValueError("exec words are non-empty one-line strings")
        return v

    @model_validator(mode="after")
    def _one_form(self) -> ContainerSpec:
        if self.exec is not None:
            if self.runtime is not None or self.name is not None:
                raise ValueError("give either exec: [...] or runtime: + name:, not both")
        elif self.runtime is None or self.name is None:
            raise ValueError("container needs runtime: (docker|podman|apptainer) and name:")
        return self

    def prefix(self) -> tuple[str, ...]:
        """The argv that runs the words after it inside the container. Environment variables
        do not cross into it: commands pass theirs explicitly (`env K=V`) inside."""
        if self.exec is not None:
            return self.exec
        assert self.name is not None
        if self.runtime == "apptainer":
            return ("apptainer", "exec", f"instance://{self.name}")
        return (str(self.runtime), "exec", "-i", self.name)

    @property
    def label(self) -> str:
        if self.exec is not None:
            return "exec: " + " ".join(self.exec)
        return f"{self.runtime}:{self.name}"


class HostEntry(_Strict):
    name: str
    address: str | None = None
    role: Literal["head", "worker"] | None = None
    node_ip: str | None = None
    python: str | None = None
    transport: Literal["ssh", "local"] = "ssh"
    num_gpus: int | None = Field(default=None, ge=0, description="default: what NVML counts")
    ssh: SshOptions | None = None
    # None: the top level's; [] / null turn the top level's off for this host.
    env_setup: tuple[SetupStep, ...] | None = None  # a string or a list of strings in the file
    container: ContainerSpec | None = None

    _setup = field_validator("env_setup", mode="before")(
        classmethod(lambda cls, v: _setup_steps(v))
    )

    @field_validator("name")
    @classmethod
    def _check_name(cls, v: str) -> str:
        if not _NAME_RE.match(v):
            raise ValueError("host names use letters, digits, '.', '_' and '-' (max 63)")
        return v

    @field_validator("address", "node_ip")
    @classmethod
    def _check_address(cls, v: str | None) -> str | None:
        if v is None:
            return None
        address = normalize_address(v)
        if address is None:
            raise ValueError(f"{v!r} is not a host name or IP address")
        return address


class HostsFileModel(_Strict):
    cluster: str = "default"
    python: str = "python3"
    ssh: SshOptions = SshOptions()
    telemetry: TelemetryOptions = TelemetryOptions()
    ray: RayOptions = RayOptions()
    # Extra environment variable names whose values are secrets (masked, never stored),
    # beyond the names that say so themselves (…KEY, …TOKEN, …SECRET, …PASSWORD, …CREDENTIAL).
    secret_env: list[str] = Field(default_factory=list, max_length=1000)
    notify: NotifyTargets | None = None  # where supervisor events go (tui/config/notify.py)
    stall: StallOptions = StallOptions()  # when a running job counts as stalled
    env_setup: tuple[SetupStep, ...] | None = None  # a string or a list of strings in the file
    container: ContainerSpec | None = None
    hosts: list[HostEntry] = Field(min_length=1)
    # A cockpit on this file shows everything and changes nothing (tui/screens/readonly.py).
    readonly: bool = False
    # The cockpit serves its data for Prometheus here (tui/export): loopback HOST:PORT only.
    prometheus: str | None = Field(default=None, max_length=100)

    _setup = field_validator("env_setup", mode="before")(
        classmethod(lambda cls, v: _setup_steps(v))
    )

    @field_validator("cluster")
    @classmethod
    def _check_cluster(cls, v: str) -> str:
        # The name is a folder of the state dir (history, queue, archive): one safe segment.
        return check_cluster_name(v)

    @field_validator("prometheus")
    @classmethod
    def _check_prometheus(cls, v: str | None) -> str | None:
        if v is not None:
            parse_listen(v)  # ListenError (a ValueError) names what is wrong
        return v

    @field_validator("secret_env")
    @classmethod
    def _check_secret_env(cls, v: list[str]) -> list[str]:
        for name in v:
            if not _ENV_NAME_RE.match(name):
                raise ValueError(f"{name!r} is not an environment variable name")
        return v


class Host(BaseModel):
    """One host with every default resolved: what the rest of the code uses."""

    model_config = ConfigDict(frozen=True)

    name: str
    address: str
    role: Literal["head", "worker"]
    node_ip: str
    python: str
    transport: Literal["ssh", "local"]
    ssh: SshOptions
    num_gpus: int | None = None
    env_setup: tuple[str, ...] = ()  # shell steps run before every command on the host
    container: ContainerSpec | None = None  # every command runs inside it

    @property
    def is_head(self) -> bool:
        return self.role == "head"

    @property
    def command_timeout(self) -> float:
        """Seconds a short command here may take to answer (ssh.command_timeout)."""
        return self.ssh.command_timeout or DEFAULT_COMMAND_TIMEOUT


def _is_loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


class Inventory(BaseModel):
    model_config = ConfigDict(frozen=True)

    cluster: str
    hosts: tuple[Host, ...]
    telemetry: TelemetryOptions = TelemetryOptions()
    ray: RayOptions = RayOptions()
    secret_env: tuple[str, ...] = ()
    notify: NotifyTargets | None = None
    stall: StallOptions = StallOptions()
    prometheus: str | None = None  # loopback HOST:PORT the cockpit serves metrics on
    readonly: bool = False  # the cockpit refuses every action that changes anything
    source: Path | None = None  # None: the built-in localhost inventory

    @property
    def head(self) -> Host:
        return next(h for h in self.hosts if h.is_head)

    @property
    def insecure_hosts(self) -> list[str]:
        return [h.name for h in self.hosts if h.ssh.insecure_skip_host_key_check]

    def host(self, name: str) -> Host:
        hosts, by_name = self._hosts_by_name
        if hosts is self.hosts:
            found = by_name.get(name)
        else:  # a copy made with other hosts (model_copy keeps what was cached)
            found = next((h for h in self.hosts if h.name == name), None)
        if found is None:
            raise KeyError(name)
        return found

    @cached_property
    def _hosts_by_name(self) -> tuple[tuple[Host, ...], dict[str, Host]]:
        # Asked per host by each of the doctor's checks: at 1,024 hosts a walk of the list
        # each time was 5,000 walks of 1,024 hosts a `check`. Kept with the hosts it is of.
        by_name: dict[str, Host] = {}
        for h in self.hosts:
            by_name.setdefault(h.name, h)
        return self.hosts, by_name

    def host_of_ip(self, ip: object) -> str | None:
        """The host a node IP that Ray reports belongs to (None: no host of this file).

        Ray reports a node started with a loopback --node-ip-address (the local cockpit's
        127.0.0.1) under the machine's own primary address instead (Ray 2.60's
        resolve_ip_for_localhost): such an address, claimed by no other host, is the one
        loopback host's, when there is exactly one."""
        if not isinstance(ip, str) or not ip:
            return None
        hosts, by_ip, loopback = self._hosts_by_ip
        if hosts is not self.hosts:  # a copy made with other hosts (model_copy keeps the cache)
            hosts, by_ip, loopback = self._ip_map()
        return by_ip.get(ip, loopback)

    @cached_property
    def _hosts_by_ip(self) -> tuple[tuple[Host, ...], dict[str, str], str | None]:
        # Asked per actor and task of a job (thousands, at 1,024 hosts): one dict, built once,
        # kept with the hosts it is of.
        return self._ip_map()

    def _ip_map(self) -> tuple[tuple[Host, ...], dict[str, str], str | None]:
        by_ip: dict[str, str] = {}
        for h in self.hosts:
            by_ip.setdefault(h.node_ip, h.name)
        loopback = [h.name for h in self.hosts if _is_loopback(h.node_ip)]
        return self.hosts, by_ip, loopback[0] if len(loopback) == 1 else None


_KNOWN_KEYS = sorted(
    {
        k
        for m in (
            SshOptions,
            TelemetryOptions,
            RayOptions,
            ContainerSpec,
            NotifyOptions,
            StallOptions,
            HostEntry,
            HostsFileModel,
        )
        for k in m.model_fields
    }
)


def _describe(err: ErrorDetails) -> str:
    kind = err.get("type", "")
    if kind == "extra_forbidden":
        close = difflib.get_close_matches(str(err["loc"][-1]), _KNOWN_KEYS, n=1)
        return "unknown key" + (f" (did you mean {close[0]!r}?)" if close else "")
    if kind == "missing":
        return "required key is missing"
    if kind == "too_short" and err["loc"] == ("hosts",):
        return "no hosts listed"
    msg = err.get("msg", "invalid value")
    return msg.removeprefix("Value error, ")


def _format_loc(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _default_python(model: HostsFileModel, host: HostEntry) -> str:
    # A local host with no interpreter named runs the agent with ours (it has pynvml).
    if host.transport == "local" and "python" not in model.model_fields_set:
        return sys.executable
    return model.python


def _inherited(host: HostEntry, model: HostsFileModel, key: str) -> Any:
    """A host's own value when its block names the key (null/[]: none), else the top level's."""
    return getattr(host if key in host.model_fields_set else model, key)


def _resolve(model: HostsFileModel, source: Path | None, doc: LocatedDoc | None) -> Inventory:
    def fail(msg: str, loc: tuple) -> ConfigError:
        return ConfigError(msg, source, doc.line_of(loc) if doc else None)

    seen: dict[str, int] = {}
    for i, h in enumerate(model.hosts):
        if h.name in seen:
            raise fail(
                f"duplicate host name {h.name!r} (also hosts[{seen[h.name]}])", ("hosts", i, "name")
            )
        seen[h.name] = i
    heads = [i for i, h in enumerate(model.hosts) if h.role == "head"]
    if len(heads) > 1:
        names = ", ".join(model.hosts[i].name for i in heads)
        raise fail(f"more than one host has role: head ({names})", ("hosts", heads[1], "role"))
    head_index = heads[0] if heads else 0

    hosts = []
    for i, h in enumerate(model.hosts):
        address = h.address or h.name
        if h.transport == "local" and h.address is None:
            address = "localhost"
        ssh = model.ssh.merged(h.ssh)
        if ssh.jump is not None:
            try:
                split_jump(ssh.jump)
            except ValueError as exc:
                raise fail(
                    f"ssh.jump {ssh.jump!r} is not [user@]host[:port]: {exc}", ("hosts", i)
                ) from None
        hosts.append(
            Host(
                name=h.name,
                address=address,
                role="head" if i == head_index else "worker",
                node_ip=h.node_ip or address,
                python=h.python or _default_python(model, h),
                transport=h.transport,
                ssh=ssh,
                num_gpus=h.num_gpus,
                env_setup=tuple(step for step in _inherited(h, model, "env_setup") or () if step),
                container=_inherited(h, model, "container"),
            )
        )
    return Inventory(
        cluster=model.cluster,
        hosts=tuple(hosts),
        telemetry=model.telemetry,
        ray=model.ray,
        secret_env=tuple(model.secret_env),
        notify=model.notify,
        stall=model.stall,
        prometheus=model.prometheus,
        readonly=model.readonly,
        source=source,
    )


def inventory_from_doc(doc: LocatedDoc) -> Inventory:
    if not isinstance(doc.data, dict):
        raise ConfigError(
            "expected a mapping with a 'hosts:' list at the top level", doc.path, doc.line_of(())
        )
    try:
        model = HostsFileModel.model_validate(doc.data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(err["loc"])
        where = _format_loc(loc)
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise ConfigError(f"{where}: {_describe(err)}{more}", doc.path, doc.line_of(loc)) from None
    return _resolve(model, doc.path, doc)


def load_inventory(path: Path | str) -> Inventory:
    """Read and check a hosts.yaml; every problem is a ConfigError naming file:line."""
    return inventory_from_doc(load_yaml(Path(path).expanduser()))


def parse_inventory(text: str, path: Path | str = "<hosts.yaml>") -> Inventory:
    return inventory_from_doc(parse_yaml(text, Path(path)))


def local_inventory() -> Inventory:
    """The built-in default: this machine, through the local transport, no SSH server needed."""
    host = Host(
        name="localhost",
        address="localhost",
        role="head",
        node_ip="127.0.0.1",
        # Our own interpreter has nvidia-ml-py (a dependency), so the agent finds pynvml.
        python=sys.executable,
        transport="local",
        ssh=SshOptions(),
    )
    return Inventory(cluster="local", hosts=(host,), source=None)
