"""The chart's ValidatingAdmissionPolicy for job pods, evaluated as the API
server evaluates it, by a CEL implementation (cel-python) on the exact
expressions of the rendered chart: the policy's resource rules and match
conditions select the request, the binding's paramRef picks the namespace's job
ServiceAccounts as params (none: parameterNotFoundAction), and for each param
the variables, then every validation; a false or failing expression denies."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import celpy
from celpy import celtypes

from tests.helm.chart import find
from tests.kube_selectors import label_matcher


def selector_string(selector: Mapping[str, Any]) -> str:
    """A LabelSelector object (matchLabels, matchExpressions) as `?labelSelector=` text."""
    terms = [f"{key}={value}" for key, value in (selector.get("matchLabels") or {}).items()]
    for expression in selector.get("matchExpressions") or []:
        operator = {"In": "in", "NotIn": "notin"}.get(expression["operator"])
        if operator is not None:
            terms.append(f"{expression['key']} {operator} ({','.join(expression['values'])})")
        else:
            terms.append(("!" if expression["operator"] == "DoesNotExist" else "") + expression["key"])
    return ",".join(terms)


def service_account_user(namespace: str, name: str) -> str:
    """The username the API server gives requests made with a ServiceAccount's token."""
    return f"system:serviceaccount:{namespace}:{name}"


@dataclass(frozen=True)
class Decision:
    applies: bool  # the policy selected the request at all
    denials: list[str]  # the messages of the validations that failed (empty: admitted)

    @property
    def admitted(self) -> bool:
        return not self.denials


class JobPodPolicy:
    def __init__(self, objects: list[dict[str, Any]]) -> None:
        (self.policy,) = find(objects, "ValidatingAdmissionPolicy")
        (self.binding,) = find(objects, "ValidatingAdmissionPolicyBinding")
        assert self.binding["spec"]["policyName"] == self.policy["metadata"]["name"]
        assert self.binding["spec"]["validationActions"] == ["Deny"]
        spec = self.policy["spec"]
        assert spec["failurePolicy"] == "Fail", "an expression that fails to evaluate denies"
        environment = celpy.Environment()

        def program(expression: str) -> Any:
            return environment.program(environment.compile(expression))

        self._conditions = [program(c["expression"]) for c in spec["matchConditions"]]
        self._variables = [(v["name"], program(v["expression"])) for v in spec.get("variables", [])]
        self._validations = [(program(v["expression"]), v["message"]) for v in spec["validations"]]

    def _selects(self, request: Mapping[str, Any]) -> bool:
        for rule in self.policy["spec"]["matchConstraints"]["resourceRules"]:
            resource = request["resource"]
            if (
                resource["group"] in rule["apiGroups"]
                and resource["version"] in rule["apiVersions"]
                and resource["resource"] in rule["resources"]
                and request["operation"] in rule["operations"]
            ):
                break
        else:
            return False
        namespaces = self.binding["spec"].get("matchResources", {}).get("namespaceSelector")
        if namespaces is not None:
            names = label_matcher(selector_string(namespaces))
            if not names({"kubernetes.io/metadata.name": request["namespace"]}):
                return False
        base = {"request": celpy.json_to_cel(request)}
        return all(_holds(condition, base) for condition in self._conditions)

    def decide(
        self,
        pod: dict[str, Any],
        username: str,
        namespace: str,
        service_accounts: list[dict[str, Any]],
        operation: str = "CREATE",
    ) -> Decision:
        """Whether the API server would admit `pod`, asked for by `username` in
        `namespace`, whose ServiceAccounts are `service_accounts`."""
        request = {
            "operation": operation,
            "namespace": namespace,
            "userInfo": {"username": username},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
        }
        if not self._selects(request):
            return Decision(applies=False, denials=[])
        param_ref = self.binding["spec"]["paramRef"]
        chosen = label_matcher(selector_string(param_ref["selector"]))
        params = [
            account
            for account in service_accounts
            if account["metadata"]["namespace"] == namespace
            and chosen(account["metadata"].get("labels") or {})
        ]
        if not params:
            action = param_ref["parameterNotFoundAction"]
            return Decision(applies=True, denials=[] if action == "Allow" else ["no params"])
        denials: list[str] = []  # each once: every param is evaluated, the first failure denies
        for param in params:
            activation: dict[str, Any] = {
                "object": celpy.json_to_cel(pod),
                "oldObject": None,
                "request": celpy.json_to_cel(request),
                "params": celpy.json_to_cel(param),
            }
            variables: dict[Any, Any] = {}
            for name, program in self._variables:
                activation["variables"] = celtypes.MapType(variables)
                variables[celtypes.StringType(name)] = _evaluate(program, activation)
            activation["variables"] = celtypes.MapType(variables)
            for program, message in self._validations:
                denial = " ".join(message.split())
                if not _holds(program, activation) and denial not in denials:
                    denials.append(denial)
        return Decision(applies=True, denials=denials)


def _evaluate(program: Any, activation: dict[str, Any]) -> Any:
    """The CEL value, or the evaluation's error as a value (using it fails in turn,
    and a failing expression is a denial under failurePolicy Fail)."""
    try:
        return program.evaluate(activation)
    except celpy.CELEvalError as error:
        return error


def _holds(program: Any, activation: dict[str, Any]) -> bool:
    value = _evaluate(program, activation)
    return isinstance(value, celtypes.BoolType) and bool(value)
