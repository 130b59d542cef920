"""Admission webhooks as their configuration declares them, and which writes the API server sends them.

From a cluster's ValidatingWebhookConfigurations and MutatingWebhookConfigurations alone, this
module predicts whether one write (:class:`Write`) is sent to one webhook (:func:`matches`), and
what becomes of the write when some webhooks' backends are down (:func:`expected_outcome`). It
calls no webhook and evaluates no CEL: a webhook with ``matchConditions`` that otherwise matches
is "cannot tell" (``Match.sent is None``). Everything here is pure logic except
:func:`discover`, which lists the configurations of a cluster.

Shapes:

- :class:`Webhook`: one ``webhooks[]`` entry of a configuration with the API defaults applied
  (``failurePolicy: Fail``, ``timeoutSeconds: 10`` (seconds), service ``port: 443``, rule
  ``scope: "*"``, ``matchPolicy: Equivalent``); ``id`` is ``"<type>/<configuration>/<name>"``.
- :class:`Write`: operation, group, version, resource (plural), subresource, namespace (None for
  a cluster-scoped object), the object's labels and its namespace's labels.
- :class:`Match`: ``sent`` (True, False, or None for "cannot tell") and ``reason``, a sentence.

Errors: :func:`webhooks_from` raises ValueError naming the configuration, the field, what was
expected and what was there; :func:`label_selector_matches` raises ValueError for a selector
the API would refuse (an unknown operator, values where none belong); :class:`Write` raises
ValueError for an unknown operation; :func:`expected_outcome` raises ValueError for a down
webhook id it was not given a Match for.

Where this differs from a plain reading of the documentation, it follows what the API server
does (k8s.io/apiserver admission webhook matching), and says so where it is done:

- a resource ``pods/*`` matches ``pods`` itself as well as its subresources (like ``*/*``);
- with ``matchPolicy: Equivalent`` a rule that differs from the write only in API group or
  version may still match through an equivalent resource (e.g. another served version of the
  same resource): "cannot tell", since served versions are not in the configuration;
- a namespace's labels always hold ``kubernetes.io/metadata.name: <its name>`` (the API server
  sets it), so it is added to ``Write.namespace_labels`` when the name is known and it is absent;
- the object of a CONNECT (PodExecOptions, PodProxyOptions, ...) has no labels, so a non-empty
  objectSelector never matches it.

Sources: Kubernetes, "Dynamic Admission Control"
(https://kubernetes.io/docs/reference/access-authn-authz/extensible-admission-controllers/:
matching requests by rules, namespaceSelector, objectSelector, matchPolicy and matchConditions;
failure policy; timeouts; side effects), the admissionregistration.k8s.io/v1 API reference
(defaults, allowed values), and "Labels and Selectors"
(https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/: set-based
requirements ``In``, ``NotIn``, ``Exists``, ``DoesNotExist``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client

from harness.kube.providers import Cluster

TYPES = {"validating": "ValidatingWebhookConfiguration", "mutating": "MutatingWebhookConfiguration"}
OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")
FAILURE_POLICIES = ("Fail", "Ignore")
SIDE_EFFECTS = ("None", "NoneOnDryRun", "Some", "Unknown")
MATCH_POLICIES = ("Exact", "Equivalent")
SCOPES = ("*", "Cluster", "Namespaced")
SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")

DEFAULT_FAILURE_POLICY = "Fail"
DEFAULT_TIMEOUT_SECONDS = 10.0
DEFAULT_SERVICE_PORT = 443
DEFAULT_MATCH_POLICY = "Equivalent"
# admissionregistration.k8s.io/v1 requires sideEffects; an object without it can only come
# from the removed v1beta1, whose default was Unknown.
DEFAULT_SIDE_EFFECTS = "Unknown"
TIMEOUT_RANGE_SECONDS = (1, 30)

# Set on every namespace by the API server, equal to its name.
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"

# The API server never sends writes of these to webhooks, so a broken webhook cannot lock
# anyone out of the configuration that would remove it.
EXEMPT_GROUP = "admissionregistration.k8s.io"
EXEMPT_RESOURCES = frozenset({
    "validatingwebhookconfigurations", "mutatingwebhookconfigurations",
    "validatingadmissionpolicies", "validatingadmissionpolicybindings",
    "mutatingadmissionpolicies", "mutatingadmissionpolicybindings",
})

# The side effects for which a dry-run request is refused instead of sent.
DRY_RUN_UNSAFE = ("Some", "Unknown")


@dataclass(frozen=True)
class Webhook:
    """One webhook of a Validating- or MutatingWebhookConfiguration, API defaults applied.

    ``configuration``: the configuration's metadata.name; ``type``: ``"validating"`` or
    ``"mutating"``; ``name``: ``webhooks[].name``; ``failure_policy``: ``"Fail"`` or
    ``"Ignore"``; ``timeout_seconds``: seconds the API server waits for an answer;
    ``service``: ``(namespace, name, port)`` or None; ``url``: or None (exactly one is set);
    ``rules``: ``{operations, apiGroups, apiVersions, resources, scope}`` dicts as in the API,
    scope defaulted; ``namespace_selector``/``object_selector``: LabelSelectors as the API gives
    them (camelCase keys), None or ``{}`` matching everything; ``match_conditions``:
    ``{name, expression}`` dicts (CEL, never evaluated here); ``side_effects``: ``"None"``,
    ``"NoneOnDryRun"``, ``"Some"`` or ``"Unknown"``; ``match_policy``: ``"Exact"`` or
    ``"Equivalent"``. Not hashable (it holds dicts): key by :attr:`id`.
    """

    configuration: str
    type: str
    name: str
    failure_policy: str
    timeout_seconds: float
    service: tuple[str, str, int] | None
    url: str | None
    rules: tuple[dict, ...]
    namespace_selector: dict | None
    object_selector: dict | None
    match_conditions: tuple[dict, ...]
    side_effects: str
    match_policy: str = DEFAULT_MATCH_POLICY

    @property
    def id(self) -> str:
        """``"<type>/<configuration>/<name>"``: unique in a cluster (a configuration's webhook
        names are unique, and so are configuration names of one type)."""
        return f"{self.type}/{self.configuration}/{self.name}"


@dataclass(frozen=True)
class Write:
    """One request kdrill may send: what the API server matches a webhook against.

    ``operation``: CREATE, UPDATE, DELETE or CONNECT (a PATCH is an UPDATE); ``group``: ``""``
    for the core group; ``resource``: the plural (``configmaps``), ``subresource`` apart
    (``scale``, ``status``); ``namespace``: None for a cluster-scoped object (for a Namespace
    object the API server's request carries its own name here, and that is allowed: it is still
    cluster-scoped); ``object_labels``: the object's labels (taken for both old and new object);
    ``namespace_labels``: the labels of ``namespace``, or for a Namespace object its own.
    Raises ValueError for an unknown operation, an empty resource or one with a ``/``.
    """

    operation: str
    group: str
    version: str
    resource: str
    subresource: str = ""
    namespace: str | None = None
    object_labels: dict = field(default_factory=dict)
    namespace_labels: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.operation not in OPERATIONS:
            raise ValueError(f"Write.operation: expected one of {', '.join(OPERATIONS)}, got {self.operation!r}")
        if not self.resource or "/" in self.resource:
            raise ValueError(f"Write.resource: expected a plural resource name (the subresource apart), "
                             f"got {self.resource!r}")
        if self.namespace == "":
            raise ValueError("Write.namespace: expected a name, or None for a cluster-scoped object, got ''")

    @property
    def is_namespace_object(self) -> bool:
        """A write of a Namespace itself (or of one of its subresources)."""
        return self.group == "" and self.resource == "namespaces"

    @property
    def cluster_scoped(self) -> bool:
        # Namespaces are cluster-scoped even when the request names one as its namespace.
        return self.namespace is None or self.is_namespace_object

    def describe(self) -> str:
        """E.g. ``CREATE v1 configmaps in namespace drill`` or ``UPDATE apps/v1 deployments/scale ...``."""
        gv = f"{self.group}/{self.version}" if self.group else self.version
        what = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        where = "(cluster-scoped)" if self.cluster_scoped else f"in namespace {self.namespace}"
        return f"{self.operation} {gv} {what} {where}"


@dataclass(frozen=True)
class Match:
    """Whether the API server sends a write to a webhook: ``sent`` True (it calls the webhook),
    False (it does not) or None (cannot tell from the configuration: matchConditions, or an
    equivalent resource under ``matchPolicy: Equivalent``); ``reason``: why, in a sentence."""

    sent: bool | None
    reason: str


# --- label selectors ---------------------------------------------------------------------------

def _selector_problem(selector: Any) -> str | None:
    """What makes ``selector`` one the API would refuse, or None."""
    if selector is None:
        return None
    if not isinstance(selector, dict):
        return f"expected a LabelSelector (a dict), got {selector!r}"
    unknown = sorted(set(selector) - {"matchLabels", "matchExpressions"})
    if unknown:
        return f"expected only matchLabels and matchExpressions (camelCase, as the API gives them), got keys {unknown}"
    match_labels = selector.get("matchLabels") or {}
    if not isinstance(match_labels, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                     for k, v in match_labels.items()):
        return f"matchLabels: expected a map of strings, got {match_labels!r}"
    expressions = selector.get("matchExpressions") or []
    if not isinstance(expressions, list):
        return f"matchExpressions: expected a list, got {expressions!r}"
    for i, expression in enumerate(expressions):
        if not isinstance(expression, dict) or not isinstance(expression.get("key"), str) or not expression["key"]:
            return f"matchExpressions[{i}]: expected {{key, operator, values}}, got {expression!r}"
        operator, values = expression.get("operator"), expression.get("values") or []
        if operator not in SELECTOR_OPERATORS:
            return f"matchExpressions[{i}].operator: expected one of {', '.join(SELECTOR_OPERATORS)}, got {operator!r}"
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            return f"matchExpressions[{i}].values: expected a list of strings, got {values!r}"
        if operator in ("In", "NotIn") and not values:
            return f"matchExpressions[{i}].values: expected at least one value for {operator}, got {values!r}"
        if operator in ("Exists", "DoesNotExist") and values:
            return f"matchExpressions[{i}].values: expected none for {operator}, got {values!r}"
    return None


def label_selector_matches(selector: dict | None, labels: dict) -> bool:
    """Whether ``labels`` satisfy the LabelSelector ``selector`` (camelCase keys, as the API
    gives it): every ``matchLabels`` pair AND every ``matchExpressions`` requirement (``In``: the
    key is present with one of the values; ``NotIn``: the key is absent or has none of them;
    ``Exists``; ``DoesNotExist``). None or ``{}`` matches everything. Raises ValueError for a
    selector the API would refuse (an unknown operator, ``In`` without values, unknown keys)."""
    problem = _selector_problem(selector)
    if problem:
        raise ValueError(f"label selector: {problem}")
    if not selector:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


def _selector_empty(selector: dict | None) -> bool:
    return not selector or (not selector.get("matchLabels") and not selector.get("matchExpressions"))


# --- configurations ----------------------------------------------------------------------------

def _bad(configuration: str, field_: str, expected: str, got: Any) -> ValueError:
    return ValueError(f"webhook configuration {configuration!r}: {field_}: expected {expected}, got {got!r}")


def _strings(where: str, field_: str, value: Any, allowed: tuple[str, ...] | None = None) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _bad(where, field_, "a list of strings", value)
    if allowed is not None:
        for v in value:
            if v not in allowed:
                raise _bad(where, field_, f"items among {', '.join(allowed)}", v)
    return list(value)


def _rule(where: str, field_: str, rule: Any) -> dict:
    if not isinstance(rule, dict):
        raise _bad(where, field_, "a rule {operations, apiGroups, apiVersions, resources, scope}", rule)
    scope = rule.get("scope") or "*"
    if scope not in SCOPES:
        raise _bad(where, f"{field_}.scope", "'*', 'Cluster' or 'Namespaced'", scope)
    return {
        "operations": _strings(where, f"{field_}.operations", rule.get("operations"), OPERATIONS + ("*",)),
        "apiGroups": _strings(where, f"{field_}.apiGroups", rule.get("apiGroups")),
        "apiVersions": _strings(where, f"{field_}.apiVersions", rule.get("apiVersions")),
        "resources": _strings(where, f"{field_}.resources", rule.get("resources")),
        "scope": scope,
    }


def _one_of(where: str, field_: str, value: Any, allowed: tuple[str, ...], default: str) -> str:
    if value is None:
        return default
    if value not in allowed:
        raise _bad(where, field_, " or ".join(repr(a) for a in allowed), value)
    return value


def _webhook(where: str, type_: str, i: int, hook: Any) -> Webhook:
    at = f"webhooks[{i}]"
    if not isinstance(hook, dict):
        raise _bad(where, at, "a webhook (a dict)", hook)
    snake = sorted(k for k in hook if "_" in k)
    if snake:
        # ApiClient model .to_dict() gives snake_case keys, which would silently read as absent.
        raise _bad(where, at, "camelCase keys (kubectl -o json, ApiClient.sanitize_for_serialization)", snake)
    name = hook.get("name")
    if not isinstance(name, str) or not name:
        raise _bad(where, f"{at}.name", "a non-empty string", name)

    timeout = hook.get("timeoutSeconds")
    if timeout is None:
        timeout = DEFAULT_TIMEOUT_SECONDS
    low, high = TIMEOUT_RANGE_SECONDS
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not low <= timeout <= high:
        raise _bad(where, f"{at}.timeoutSeconds", f"a number of seconds from {low} to {high}", timeout)

    client_config = hook.get("clientConfig")
    if not isinstance(client_config, dict):
        raise _bad(where, f"{at}.clientConfig", "a dict with service or url", client_config)
    service, url = client_config.get("service"), client_config.get("url")
    if (service is None) == (url is None):
        raise _bad(where, f"{at}.clientConfig", "exactly one of service and url", client_config)
    if url is not None and (not isinstance(url, str) or not url):
        raise _bad(where, f"{at}.clientConfig.url", "a URL", url)
    if service is not None:
        if not isinstance(service, dict) or not all(isinstance(service.get(k), str) and service.get(k)
                                                    for k in ("namespace", "name")):
            raise _bad(where, f"{at}.clientConfig.service", "{namespace, name, port}", service)
        port = service.get("port")
        port = DEFAULT_SERVICE_PORT if port is None else port
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise _bad(where, f"{at}.clientConfig.service.port", "a port from 1 to 65535", port)
        service = (service["namespace"], service["name"], port)

    rules = hook.get("rules") or []
    if not isinstance(rules, list):
        raise _bad(where, f"{at}.rules", "a list", rules)
    selectors = {}
    for key in ("namespaceSelector", "objectSelector"):
        problem = _selector_problem(hook.get(key))
        if problem:
            raise ValueError(f"webhook configuration {where!r}: {at}.{key}: {problem}")
        selectors[key] = copy.deepcopy(hook.get(key))
    conditions = hook.get("matchConditions") or []
    if not isinstance(conditions, list) or not all(
            isinstance(c, dict) and isinstance(c.get("name"), str) and isinstance(c.get("expression"), str)
            for c in conditions):
        raise _bad(where, f"{at}.matchConditions", "a list of {name, expression}", conditions)

    return Webhook(
        configuration=where, type=type_, name=name,
        failure_policy=_one_of(where, f"{at}.failurePolicy", hook.get("failurePolicy"), FAILURE_POLICIES,
                               DEFAULT_FAILURE_POLICY),
        timeout_seconds=float(timeout), service=service, url=url,
        rules=tuple(_rule(where, f"{at}.rules[{j}]", r) for j, r in enumerate(rules)),
        namespace_selector=selectors["namespaceSelector"], object_selector=selectors["objectSelector"],
        match_conditions=tuple(copy.deepcopy(conditions)),
        side_effects=_one_of(where, f"{at}.sideEffects", hook.get("sideEffects"), SIDE_EFFECTS,
                             DEFAULT_SIDE_EFFECTS),
        match_policy=_one_of(where, f"{at}.matchPolicy", hook.get("matchPolicy"), MATCH_POLICIES,
                             DEFAULT_MATCH_POLICY),
    )


def webhooks_from(configuration: dict, type: str) -> list[Webhook]:
    """The webhooks of one ValidatingWebhookConfiguration (``type="validating"``) or
    MutatingWebhookConfiguration (``type="mutating"``) given as a plain dict with camelCase keys
    (``kubectl get -o json``, ``ApiClient.sanitize_for_serialization``), in their order, with
    the API defaults applied: failurePolicy Fail, timeoutSeconds 10, service port 443, rule
    scope ``*``, matchPolicy Equivalent (sideEffects, required by the API, Unknown if absent).
    A configuration without webhooks has none.

    Raises ValueError ``webhook configuration 'NAME': FIELD: expected ..., got ...`` for input
    the API would not give: not a dict, no metadata.name, a ``kind`` other than ``type``'s, an
    unknown ``type``, ``webhooks`` not a list, a webhook without a name or with a value outside
    the allowed ones (failurePolicy, sideEffects, matchPolicy, scope, operations, a selector's
    operator, timeoutSeconds outside 1..30), snake_case keys, or not exactly one of
    ``clientConfig.service`` and ``clientConfig.url``."""
    if not isinstance(configuration, dict):
        raise _bad("?", "<configuration>", "a Validating/MutatingWebhookConfiguration as a dict",
                   configuration.__class__.__name__)
    metadata = configuration.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    if not isinstance(name, str) or not name:
        raise _bad("?", "metadata.name", "a non-empty string", name)
    if type not in TYPES:
        raise _bad(name, "type", "'validating' or 'mutating'", type)
    kind = configuration.get("kind")
    if kind is not None and kind != TYPES[type]:
        raise _bad(name, "kind", f"{TYPES[type]} (type {type!r})", kind)
    hooks = configuration.get("webhooks")
    if hooks is None:
        return []
    if not isinstance(hooks, list):
        raise _bad(name, "webhooks", "a list", hooks.__class__.__name__)
    return [_webhook(name, type, i, hook) for i, hook in enumerate(hooks)]


# --- matching ----------------------------------------------------------------------------------

def _resource_matches(pattern: str, resource: str, subresource: str) -> bool:
    # As the API server splits a rule's resource at the first "/": "*" and "pods" name no
    # subresource; "pods/*" and "*/*" match any subresource, and (as the API server does, though
    # the documentation only speaks of subresources) the resource itself too.
    res, _, sub = pattern.partition("/")
    return res in ("*", resource) and sub in ("*", subresource)


def _scope_matches(scope: str, write: Write) -> bool:
    if scope == "Cluster":
        return write.cluster_scoped
    if scope == "Namespaced":
        return not write.cluster_scoped
    return True


def _rule_misses(rule: dict, write: Write) -> list[str]:
    """The rule's fields the write does not match (empty: the rule matches)."""
    misses = []
    if not {"*", write.operation} & set(rule["operations"]):
        misses.append("operations")
    if not {"*", write.group} & set(rule["apiGroups"]):
        misses.append("apiGroups")
    if not {"*", write.version} & set(rule["apiVersions"]):
        misses.append("apiVersions")
    if not any(_resource_matches(r, write.resource, write.subresource) for r in rule["resources"]):
        misses.append("resources")
    if not _scope_matches(rule["scope"], write):
        misses.append("scope")
    return misses


def _namespace_labels(write: Write) -> dict:
    labels = dict(write.namespace_labels)
    # The API server keeps this label equal to the namespace's name on every namespace.
    if write.namespace and NAMESPACE_NAME_LABEL not in labels:
        labels[NAMESPACE_NAME_LABEL] = write.namespace
    return labels


def matches(webhook: Webhook, write: Write) -> Match:
    """Whether the API server sends ``write`` to ``webhook``, from its configuration alone.

    In order: writes of admission configuration objects (group admissionregistration.k8s.io:
    webhook configurations, admission policies and their bindings) are never sent; some rule
    must match (operation, API group, version, resource/subresource, scope), or under
    ``matchPolicy: Equivalent`` one differing only in group or version may (None); the
    namespaceSelector must match the namespace's labels (a Namespace object: its own; any other
    cluster-scoped object: no effect); the objectSelector must match the object's labels (never
    a CONNECT's options object); then matchConditions, if any, decide (None: not evaluated)."""
    what = write.describe()
    if write.group == EXEMPT_GROUP and write.resource in EXEMPT_RESOURCES:
        return Match(False, f"{what}: the API server never sends writes of {EXEMPT_GROUP} {write.resource} "
                            "to admission webhooks")

    if not webhook.rules:
        return Match(False, f"the webhook has no rules, so no rule matches {what}")
    misses = [_rule_misses(rule, write) for rule in webhook.rules]
    matching = [i for i, m in enumerate(misses) if not m]
    maybe = [i for i, m in enumerate(misses) if m and set(m) <= {"apiGroups", "apiVersions"}]
    if matching:
        parts = [f"rule {matching[0]} matches {what}"]
    elif maybe and webhook.match_policy == "Equivalent":
        parts = [f"no rule matches {what} exactly; rule {maybe[0]} differs only in "
                 f"{' and '.join(misses[maybe[0]])}, and under matchPolicy Equivalent the API server sends the "
                 "write if the resource is also served in a group/version the rule names (the configuration does "
                 "not say)"]
    else:
        detail = "; ".join(f"rule {i} differs in {', '.join(m)}" for i, m in enumerate(misses))
        return Match(False, f"no rule matches {what} ({detail})")

    if not _selector_empty(webhook.namespace_selector):
        if write.cluster_scoped and not write.is_namespace_object:
            parts.append(f"namespaceSelector has no effect on cluster-scoped {write.resource}")
        else:
            labels = _namespace_labels(write)
            whose = f"namespace {write.namespace}" if write.namespace else "the namespace"
            if not label_selector_matches(webhook.namespace_selector, labels):
                parts.append(f"namespaceSelector excludes {whose} (labels {labels})")
                return Match(False, "; ".join(parts))
            parts.append(f"namespaceSelector matches {whose}")

    if not _selector_empty(webhook.object_selector):
        if write.operation == "CONNECT":
            # The object of a CONNECT is an options object (PodExecOptions, ...), which has no
            # labels; the API server counts an object that cannot have labels as not matching.
            parts.append("objectSelector never matches a CONNECT (its options object has no labels)")
            return Match(False, "; ".join(parts))
        if not label_selector_matches(webhook.object_selector, write.object_labels):
            parts.append(f"objectSelector excludes the object (labels {write.object_labels})")
            return Match(False, "; ".join(parts))
        parts.append("objectSelector matches the object")

    if not matching:
        return Match(None, "; ".join(parts))
    if webhook.match_conditions:
        names = ", ".join(str(c.get("name")) for c in webhook.match_conditions)
        parts.append(f"matchConditions {names} decide (CEL matchConditions not evaluated by kdrill)")
        return Match(None, "; ".join(parts))
    return Match(True, "; ".join(parts))


# --- outcome -----------------------------------------------------------------------------------

def expected_outcome(webhook_matches: list[tuple[Webhook, Match]], backend_down: set[str],
                     dry_run: bool = True) -> tuple[str | None, str]:
    """What the API server does with one write, given every webhook's :class:`Match` for it and
    the ids (:attr:`Webhook.id`) of the webhooks whose backend is down (refuses connections, or
    never answers within ``timeout_seconds``), assuming every webhook that answers allows it.

    Returns ``("rejected", reason)`` when a webhook the write is sent to is down with
    failurePolicy Fail, or, for a server-side dry run (``dry_run``, what kdrill's admission
    probe sends), has sideEffects Some or Unknown: the API server then refuses the request
    without calling it (``admission webhook "NAME" does not support dry run``), whatever the
    failurePolicy and the backend. ``("admitted", reason)`` when no webhook the write is sent to
    is either; a down webhook with failurePolicy Ignore only delays it (the reason gives the
    most seconds: mutating webhooks are called one after another, validating ones together).
    ``(None, reason)`` when it turns on a webhook whose ``Match.sent`` is None. Raises
    ValueError when ``backend_down`` names a webhook not in ``webhook_matches``."""
    known = {hook.id for hook, _ in webhook_matches}
    unknown = sorted(set(backend_down) - known)
    if unknown:
        raise ValueError(f"backend_down: expected ids of the given webhooks ({', '.join(sorted(known)) or 'none'}), "
                         f"got {unknown}")

    rejects: list[str] = []
    undecided: list[str] = []
    ignored: list[Webhook] = []
    for hook, match in webhook_matches:
        if match.sent is False:
            continue
        causes = []
        if dry_run and hook.side_effects in DRY_RUN_UNSAFE:
            causes.append(f"sideEffects {hook.side_effects} on a dry run (admission webhook \"{hook.name}\" "
                          "does not support dry run)")
        down = hook.id in backend_down
        if down and hook.failure_policy == "Fail":
            causes.append(f"backend down with failurePolicy Fail (failed calling webhook \"{hook.name}\")")
        if causes:
            (rejects if match.sent else undecided).append(f"{hook.id}: {' and '.join(causes)}")
        elif down:
            ignored.append(hook)  # Ignore: a failed call lets the write through, sent or not

    if rejects:
        return "rejected", "rejected: " + "; ".join(rejects)
    if undecided:
        return None, ("cannot tell, it turns on whether the write is sent to " + "; ".join(undecided)
                      + " (see each webhook's Match)")
    if not ignored:
        return "admitted", ("admitted: no webhook the write is sent to is down with failurePolicy Fail"
                            + (" or refuses a dry run" if dry_run else "")
                            + " (assuming every webhook that answers allows it)")
    mutating = sum(h.timeout_seconds for h in ignored if h.type == "mutating")
    validating = max((h.timeout_seconds for h in ignored if h.type == "validating"), default=0.0)
    names = ", ".join(h.id for h in ignored)
    return "admitted", (f"admitted: down webhooks {names} have failurePolicy Ignore (the failed call is ignored, "
                        f"after up to {mutating + validating:g} s of timeouts), assuming every webhook that answers "
                        "allows it")


# --- cluster -----------------------------------------------------------------------------------

def discover(cluster: Cluster) -> list[Webhook]:
    """Every webhook of the cluster's Validating- and MutatingWebhookConfigurations, sorted by
    :attr:`Webhook.id`; each list request waits at most 10 s. Raises what the client raises
    (ApiException, a timeout) and ValueError as :func:`webhooks_from`."""
    api = client.AdmissionregistrationV1Api(cluster.api)
    hooks: list[Webhook] = []
    for type_, listing in (("validating", api.list_validating_webhook_configuration),
                           ("mutating", api.list_mutating_webhook_configuration)):
        for item in listing(_request_timeout=10).items:
            hooks.extend(webhooks_from(cluster.api.sanitize_for_serialization(item), type_))
    return sorted(hooks, key=lambda hook: hook.id)
