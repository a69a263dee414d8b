"""The package's import graph is a DAG, every intra-package import is at module top, and the
modules the CLIs and log readers need never load TVM.

Function-level imports are allowed only for the heavy or optional third-party modules of
``LAZY`` (each with the reason it is imported late); the commands (``tc_autotune.cli``,
which ``scripts/`` call) import the package after parsing their arguments, so a bad argument
fails fast without TVM, and import only light modules at their top.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "tc_autotune"
COMMANDS = f"{PACKAGE}.cli"  # the console commands: entry points, like scripts/

# third-party module -> why it may be imported inside a function
LAZY = {
    "tvm": "~1 s to import and needs the CUDA libraries: only where a kernel is built or run",
    "tvm_ffi": "TVM's FFI, with tvm",
    "xgboost": "~0.5 s to import: only when a cost model is fitted or loaded",
    "torch": "optional (cuDNN baseline), seconds to import",
    "matplotlib": "optional (plots)",
    "tomllib": "stdlib on 3.11+, tomli before: chosen at call time",
    "tomli": "the tomllib fallback on 3.10",
}
# Modules that must not load TVM (log readers, CLIs' argument checks, search, zero-shot).
LIGHT = ("workloads.conv2d", "workloads.conv_weights", "workloads.dense", "workloads.epilogue",
         "workloads.spec", "workloads.names", "workloads.host_dtypes", "backends.cuda.gpu", "backends.cuda.driver",
         "templates.tc_gemm.gemm", "database.journal", "core.results", "templates.tc_gemm.knobs",
         "templates.tc_gemm.rules", "templates.tc_gemm.intrinsic_paths", "templates.tc_gemm.prior",
         "core.config_space", "search.cost_model", "search.tuner", "database.records", "cli.common",
         "workloads.reference", "backends.cuda.nvcc", "backends.cuda.toolkit", "tuning.jobs", "search.zero_shot", "api.apply",
         "core.tasks", "measure.dispatch", "measure.devices", "tuning.duplicates",
         "templates.tc_gemm.generator", "measure.runner_protocol", "backends.cuda.code_hash",
         "database.record", "database.origin", "database.logs", "database.selection", "database.merge",
         "database.summary", "database.restamp", "database.paths", "core.builtin_tasks",
         "search.tree_ranker", "tuning.zero_shot_train", "tuning.zero_shot_eval", "core.template",
         "templates.tc_gemm.template", "templates.tc_gemm.validity", "templates.tc_gemm.features",
         "search.xgb_tuner", "search.anneal", "search.progress", "templates.tc_gemm.wgmma_source",
         "templates.tc_gemm.workspaces", "templates.tc_gemm.views",
         "templates.tc_gemm.starting_tilings", "templates.registry",
         "backends.cuda.timer")  # the timer: PyTorch processes time the baselines with it

# Modules that load a module of the package by name (``importlib.import_module``), with why: the
# graph above does not see those loads, so they are few and listed.  A template's TVM side is a
# plug-in of its template (``Template.lowering_module``), loaded where a kernel is first lowered
# or scheduled: what builds kernels (api, relax) goes through the template protocol and names no
# template's module.
BY_NAME = {
    PACKAGE: "the face's lazy exports (tc.build_conv2d, ...) and submodules: light imports stay light",
    f"{PACKAGE}.core.template": "a template's TVM side, which the template names, where a kernel is first lowered"
                                " or scheduled",
    f"{PACKAGE}.measure.rpc_server": "the --init hook that a GPU host's command line names",
}

# What a kernel build runs reads the stored zero-shot model: it never reaches the modules that
# train it, and the modules that pick and rank import no xgboost, not even inside a function.
BUILD_SIDE = ("api.kernel", "api.functional", "api.build_cache", "api.apply", "search.zero_shot",
              "search.tree_ranker")
TRAINING_SIDE = ("tuning.zero_shot_train", "tuning.zero_shot_eval")
NO_XGBOOST = ("api.apply", "search.zero_shot", "search.tree_ranker")

# Subpackages that import an optional third-party module at their top: the rest of the package
# may import them only inside a function, where that module is known to be there.
OPTIONAL_SUBPACKAGES = {f"{PACKAGE}.pytorch": "imports torch (optional): only where a torch tensor is in hand"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    found = {_module_name(p): p for p in (ROOT / PACKAGE).rglob("*.py")}
    found.update({f"scripts.{p.stem}": p for p in (ROOT / "scripts").glob("*.py")})
    return found


def _entry_point(name: str) -> bool:
    """Scripts and commands: they parse arguments before importing what does the work."""
    return name.startswith("scripts.") or name.startswith(COMMANDS + ".")


def _imports(name: str, path: Path):
    """(imported module, line, inside a function, top-level third-party root) of one file."""
    modules = _modules()
    if name.startswith("scripts."):
        package = PACKAGE
    else:
        package = name if path.name == "__init__.py" else name.rpartition(".")[0] or PACKAGE
    out = []

    def resolve(base: str, names):
        targets = [f"{base}.{n}" for n in names if f"{base}.{n}" in modules]
        return targets or [base]

    class Visitor(ast.NodeVisitor):
        depth = 0

        def visit_FunctionDef(self, node):
            self.depth += 1
            self.generic_visit(node)
            self.depth -= 1

        visit_AsyncFunctionDef = visit_FunctionDef
        visit_Lambda = visit_FunctionDef

        def visit_Import(self, node):
            for alias in node.names:
                out.append((alias.name, node.lineno, self.depth > 0))

        def visit_ImportFrom(self, node):
            if node.level:
                base = package if node.level == 1 else package.rsplit(".", node.level - 1)[0]
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module
            for target in resolve(base, [a.name for a in node.names]):
                out.append((target, node.lineno, self.depth > 0))

    Visitor().visit(ast.parse(path.read_text(), str(path)))
    return out


def _package_module(target: str, modules) -> str | None:
    """The package's module an import names (a name imported from a module: the module), or
    None for a third-party import."""
    if not (target == PACKAGE or target.startswith(PACKAGE + ".")):
        return None
    while target not in modules:
        target = target.rpartition(".")[0]
    return target


def _optional(module: str) -> bool:
    return any(module == sub or module.startswith(sub + ".") for sub in OPTIONAL_SUBPACKAGES)


def _graph():
    modules = _modules()
    edges, lazy = {}, []
    for name, path in modules.items():
        edges[name] = set()
        for target, line, in_function in _imports(name, path):
            if module := _package_module(target, modules):
                target = module
                edges[name].add(target)
                if in_function and not _entry_point(name) and not _optional(target):
                    lazy.append(f"{path.name}:{line} imports {target} inside a function")
            elif in_function and target.split(".")[0] not in LAZY and not _entry_point(name):
                lazy.append(f"{path.name}:{line} imports {target} inside a function (not in LAZY)")
    return edges, lazy


def test_intra_package_imports_are_at_module_top():
    _, lazy = _graph()
    assert not lazy, "\n".join(lazy)


# The deepest chain of modules, in floors (1: a module importing none of the package).  It is as
# deep as the roles' layering (MAX_ROLE_DEPTH, below), and a floor of it is a job of its own:
#   the adapters on the cached builds: pytorch (its face, bench) -> optimize, library (or
#     api.functional) -> ops, the eager launch path; relax (its face, bench) -> partition,
#     building -> kernels; then api.build_cache -> apply, the choice of a config -> the logs read
#     (database.logs, selection) or the zero-shot search -> the record format (database.record)
#     -> the task registry (core.tasks);
#   a nightly run: cli.nightly -> tuning.nightly -> a tuning job (autotune) -> a build (api.build
#     -> apply) or the records' facade (-> merge, restamp, summary) -> logs, selection -> record
#     -> core.tasks;
#   the template: the package face (or cli.benchmark) -> templates.registry -> tc_gemm.template ->
#     features, prior, validity -> intrinsic_paths -> rules -> the GEMM view -> operand_layout.
# What keeps them at 8 is that the bottom floors stand on little.  The task registry imports nothing
# (the face gives a task its template, whose Template.space makes its space); the record is the
# format alone (origin.stamped, above it, stamps a measurement with its code hash and
# provenance); the workload kinds share workloads.spec and import none of each other
# (workloads.names reads a name of either kind, for what takes names: the selection and the
# zero-shot search take workloads already made).  Above: both runners measure with
# measure.bench and neither imports the other, and a nightly run makes its spaces through the
# tasks, as a tuning job does, not through templates.registry.
MAX_DEPTH = 8

# Space, search (tuners, cost model, transfer, zero-shot) and database take a template as a
# parameter (a space's, or a task's, which the package face binds): none of them imports one,
# directly or not.
TEMPLATE_FREE = ("core", "search", "database")


def _depths(edges) -> dict:
    """Each module's floor: 1 for a module importing no other of the package, else one above
    the highest it imports (the graph is a DAG: the test below checks it first)."""
    depth = {}

    def floor(node):
        if node not in depth:
            depth[node] = 1 + max((floor(t) for t in edges[node] if t != node), default=0)
        return depth[node]

    for node in edges:
        floor(node)
    return depth


def test_the_import_graph_gets_no_deeper():
    edges, _ = _graph()
    test_the_import_graph_is_a_dag_from_workloads_and_gpu_up()
    depth = _depths({n: t for n, t in edges.items() if not n.startswith("scripts.")})
    chain, node = [], max(depth, key=depth.get)
    while True:
        chain.append(node)
        below = [t for t in edges[node] if t != node and depth[t] == depth[node] - 1]
        if not below:
            break
        node = sorted(below)[0]
    assert depth[chain[0]] <= MAX_DEPTH, " -> ".join(chain)


# The roles (the subpackages, and the face) form a DAG of at most this many floors: workloads
# and backends at the bottom, then core, database and templates, search, api, measure, tuning,
# and the faces for users (commands, PyTorch, Relax) on top.  Where api and relax reach the
# optional PyTorch adapter inside a function (a torch tensor in hand, a torch model to
# benchmark) it is a call into a plug-in, not a floor of the layering.
MAX_ROLE_DEPTH = 8


def _role(name: str) -> str:
    """A module's role: its subpackage (``_version``, a leaf, is its own), or the face."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else "face"


def _role_graph() -> dict:
    modules = _modules()
    roles: dict = {}
    for name, path in modules.items():
        if name.startswith("scripts."):
            continue
        role = _role(name)
        roles.setdefault(role, set())
        for target, _, in_function in _imports(name, path):
            module = _package_module(target, modules)
            if module and _role(module) != role and not (in_function and _optional(module)):
                roles[role].add(_role(module))
    return roles


def test_the_roles_form_a_shallow_dag():
    roles = _role_graph()
    depth: dict = {}

    def floor(role, stack):
        assert role not in stack, "roles import each other: " + " -> ".join(stack + [role])
        if role not in depth:
            depth[role] = 1 + max((floor(t, stack + [role]) for t in roles[role]), default=0)
        return depth[role]

    for role in sorted(roles):
        floor(role, [])
    assert depth["workloads"] == depth["backends"] == 1, depth
    assert max(depth.values()) <= MAX_ROLE_DEPTH, sorted(depth.items(), key=lambda kv: kv[1])


def test_core_search_and_database_import_no_template():
    edges, _ = _graph()
    for name in sorted(edges):
        if name.split(".")[1:2] and name.split(".")[1] in TEMPLATE_FREE:
            reached = sorted(m for m in _closure(edges, name) if m.startswith(f"{PACKAGE}.templates"))
            assert not reached, f"{name} imports {reached}"


def test_the_import_graph_is_a_dag_from_workloads_and_gpu_up():
    edges, _ = _graph()
    order, state = [], {}

    def visit(node, stack):
        if state.get(node) == "done":
            return
        assert state.get(node) != "open", "import cycle: " + " -> ".join(stack + [node])
        state[node] = "open"
        for target in sorted(edges[node]):
            visit(target, stack + [node])
        state[node] = "done"
        order.append(node)

    for node in sorted(edges):
        visit(node, [])
    faces = {PACKAGE, f"{PACKAGE}.workloads"}  # package faces: their imports are their own modules
    for bottom in ("workloads.epilogue", "workloads.conv_weights", "workloads.spec", "backends.cuda.driver"):
        assert edges[f"{PACKAGE}.{bottom}"] <= faces, edges[f"{PACKAGE}.{bottom}"]
    # the GPU's facts are the driver's
    assert edges[f"{PACKAGE}.backends.cuda.gpu"] <= faces | {f"{PACKAGE}.backends.cuda.driver"}
    # workloads name their fused epilogue and share a spec grammar and dtype rules (``spec``); a
    # conv's weight layouts and groups are its own module's; the kinds import none of each other:
    # a name of either kind is read above both (``names``)
    dense, conv2d, epilogue, weights, spec = (f"{PACKAGE}.workloads.{m}" for m in ("dense", "conv2d", "epilogue",
                                                                                  "conv_weights", "spec"))
    assert edges[spec] <= faces
    assert edges[dense] <= faces | {epilogue, spec}
    assert edges[conv2d] <= faces | {epilogue, weights, spec}
    assert not any(name in targets for targets in edges.values() for name in edges if name.startswith("scripts."))
    # only the scripts import the commands
    assert not [(name, target) for name, targets in edges.items() if not name.startswith("scripts.")
                for target in targets if target.startswith(COMMANDS + ".") and target != f"{COMMANDS}.common"]


def _closure(edges, name) -> set:
    """``name`` and every module it imports, directly or not."""
    seen, todo = set(), [name]
    while todo:
        node = todo.pop()
        if node not in seen:
            seen.add(node)
            todo.extend(edges[node])
    return seen


def test_light_modules_never_load_tvm():
    modules = _modules()
    edges, _ = _graph()
    for light in LIGHT:
        for name in sorted(_closure(edges, f"{PACKAGE}.{light}")):
            tvm = [line for target, line, in_function in _imports(name, modules[name])
                   if target.split(".")[0] in ("tvm", "tvm_ffi") and not in_function]
            assert not tvm, f"{light} imports {name}, which imports tvm at module top (line {tvm[0]})"


def test_commands_import_only_light_modules_at_their_top():
    """A command's module top (what runs before its arguments are parsed) loads no TVM: its
    package imports there are light modules, the rest come inside ``main``."""
    modules = _modules()
    light = {f"{PACKAGE}.{name}" for name in LIGHT} | {PACKAGE, COMMANDS, f"{PACKAGE}.workloads"}
    commands = sorted(name for name in modules if name.startswith(COMMANDS + ".") and name != f"{COMMANDS}.common")
    assert {c.rpartition(".")[2] for c in commands} >= {"tune", "nightly", "benchmark", "records"}
    for name in commands:
        top = [(target, line) for target, line, in_function in _imports(name, modules[name]) if not in_function]
        heavy = [f"line {line}: {target}" for target, line in top
                 if target.split(".")[0] == PACKAGE and target not in light or target.split(".")[0] in LAZY]
        assert not heavy, f"{name} imports at its top: {heavy}"


def test_a_build_never_reaches_the_training_side():
    modules = _modules()
    edges, _ = _graph()
    training = {f"{PACKAGE}.{name}" for name in TRAINING_SIDE}
    for name in BUILD_SIDE:
        reached = _closure(edges, f"{PACKAGE}.{name}") & training
        assert not reached, f"{name} imports {sorted(reached)}: a build would load the zero-shot training"
    for name in NO_XGBOOST:
        module = f"{PACKAGE}.{name}"
        xgb = [line for target, line, _ in _imports(module, modules[module]) if target.split(".")[0] == "xgboost"]
        assert not xgb, f"{name} imports xgboost (line {xgb[0]})"


def test_only_the_listed_modules_load_modules_by_name():
    found: dict = {}
    for name, path in _modules().items():
        if name.startswith("scripts."):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
                if called in ("import_module", "__import__"):
                    found.setdefault(name, []).append(node.lineno)
    assert set(found) == set(BY_NAME), found


def test_each_template_names_its_tvm_side_and_api_imports_none():
    """A template's lowering module is a module of the package that imports TVM (its TVM side);
    api builds every kernel through ``Template.lower``, and relax schedules its kernels through
    ``Template.schedule``: neither imports a template's TVM side."""
    from tc_autotune.templates.registry import TEMPLATES

    modules = _modules()
    edges, _ = _graph()
    sides = {template.lowering_module for template in TEMPLATES.values()}
    for side in sides:
        assert side in modules, side
        assert any(target.split(".")[0] == "tvm" for target, _, in_function in _imports(side, modules[side])
                   if not in_function), f"{side} imports no TVM at its top: it is not a TVM side"
    for name in sorted(n for n in edges if n.startswith((f"{PACKAGE}.api.", f"{PACKAGE}.relax."))):
        reached = _closure(edges, name) & sides
        assert not reached, f"{name} imports {sorted(reached)}: it lowers through Template.lower"
