// Package dags defines retrain's pipeline specs: DAGs of steps written in
// YAML, which Compile turns into the Plan that the Pipeline workflow runs.
//
// Parse reads a file and checks its shape, Validate checks it against the
// node types a worker offers (a Registry), and Compile binds parameters and
// resolves defaults. Every error carries the file, line and column it is
// about, so `retrain validate` can point at the problem.
//
// # A spec
//
//	name: example                  # required; [a-z0-9][a-z0-9_-]*
//	description: Retrain nightly   # optional
//	params:                        # name -> declaration
//	  date: {type: string, default: "2026-01-01"}
//	  epochs: {type: int}          # no default: required
//	defaults:                      # what nodes inherit
//	  retry: {max_attempts: 3, initial_interval: 1s, backoff: 2.0, max_interval: 1m}
//	  timeout: 10m
//	  heartbeat: 30s
//	  queue: gpu
//	parallelism: 16                # max nodes running at once
//	nodes:
//	  - id: a                      # required; [A-Za-z][A-Za-z0-9_-]*
//	    type: command              # required; a registered node type
//	    with: {argv: ["sh", "-c", "echo hello"]}
//	  - id: b
//	    type: command
//	    needs: [a]                 # runs after a succeeds
//	    with: {argv: ["echo", "${params.date}", "${nodes.a.outputs.stdout}"]}
//	    retry: {max_attempts: 5}   # merged over defaults.retry
//	  - id: c
//	    type: command
//	    needs: [a]
//	    when: "${nodes.a.outputs.exit_code} == 0"
//	    with: {argv: ["true"]}
//	on_failure:                    # compensation, when the run fails
//	  - id: undo-b
//	    type: command
//	    compensates: b             # runs only if b completed
//	    with: {argv: ["echo", "rolling back", "${nodes.b.outputs.stdout}"]}
//
// JSON is YAML, so a spec may also be written as JSON.
//
// # Params
//
// Each param has a type (string, the default, int, number, bool, list or
// map), an optional default, description and required flag. A param with
// no default is required; `required: false` without a default makes the
// value null. Values given to Compile may be typed (as decoded from JSON)
// or text (from `--param k=v`), and are converted to the declared type:
// an int accepts 5, 5.0 and "5" but not 5.5; a bool "true" or "false"; a
// list or map JSON text.
//
// # Nodes
//
// A node has an id (unique across nodes and on_failure), a type, and
// optionally: description; needs, the ids of nodes that must succeed
// first; when, a condition; with, the type's inputs, checked against the
// type's fields; retry, a partial policy (max_attempts >= 1,
// initial_interval and max_interval > 0 with max_interval >=
// initial_interval, backoff >= 1, non_retryable: error types) merged field
// by field over defaults.retry and then over the built-in policy (3
// attempts, 1s, backoff 2.0, 1m); timeout, the limit of one attempt
// (default defaults.timeout, else 1h); heartbeat, the heartbeat timeout
// (default defaults.heartbeat, else 30s; 0s disables); queue, the task
// queue (default defaults.queue, else the node type's queue, else the
// worker's); outputs, the outputs a node of an open-output type adds (see
// Declared outputs).
//
// Durations use Go syntax (300ms, 1h30m) plus d for 24 hours (1d12h).
//
// # References
//
// Strings in with, and conditions, may refer to values known at run time:
//
//	${params.NAME}             a param
//	${nodes.ID.outputs.KEY}    an output of a node upstream (via needs)
//	$${                        a literal "${"
//
// A string that is exactly one reference takes the value with its type (a
// number stays a number, a list a list). A string mixing text and
// references stays a string; numbers print in shortest form (5, 0.25),
// null as nothing, lists and maps as compact JSON. ConvertWith then
// converts referenced values to their fields' declared types where that is
// unambiguous (a number into an argv item, "5" into an int field).
//
// A node may only use the outputs of nodes that run before it: those it
// needs, directly or transitively. An on_failure node may use the outputs
// of the node it compensates and of that node's upstream.
//
// # Declared outputs
//
// A node type with open outputs (NodeType.OpenOutputs: command, whose
// program may write a JSON object to the file $RETRAIN_OUTPUTS names)
// outputs keys only the run knows, so any ${nodes.ID.outputs.KEY} of such
// a node passes validation. A node may declare them instead, each with a
// type (string, int, number, bool, list, map or any):
//
//	nodes:
//	  - id: score
//	    type: command
//	    with: {argv: [python, score.py]}
//	    outputs: {auc: number, model_uri: string}
//
// Then a reference to a key neither declared nor always output by the
// type (exit_code, stdout, stderr) is an error; a reference that is a
// whole `with` value is checked against the field's type (a number into
// an argv item is fine, a string into an int field is not, though "5"
// would convert); and the run fails the node, without retrying it, when a
// declared output is missing or of another type. Outputs are not
// converted: "0.7" is a string, not a number. Declaring outputs on a type
// whose outputs are fixed is an error.
//
// # Conditions
//
// A node with `when` runs only if the condition is true:
//
//	when: "${nodes.a.outputs.exit_code} == 0 && ${params.deploy}"
//	when: "!(${nodes.eval.outputs.auc} < 0.8) || ${params.force} == 'yes'"
//	when: ${nodes.gate.outputs.passed}
//
// Operators, loosest first: ||, &&, !, then one comparison (==, !=, <, <=,
// >, >=) between operands: a reference, a number, a 'string' or "string"
// (which may hold references), true, false, null, or a parenthesised
// condition. Numbers compare numerically, also with strings that hold a
// number (outputs often arrive as text); strings compare lexically; bools
// and nulls only for equality. Values of different types are never equal,
// and ordering them is an error. A lone operand must be true or false: a
// bool, the string "true" or "false" in any case, a number (true unless
// 0), or null (false).
//
// Conditions are parsed and run by expr (github.com/expr-lang/expr), with
// its syntax cut down to the above and its operators bound to these rules;
// the language grows by registering functions (whenFuncs). A condition is
// at most 4096 bytes, 32 brackets deep and 1000 syntax nodes; a spec at
// most 1 MiB and 5000 nodes, its values at most 64 deep and 2^20 values
// after expanding YAML aliases. Input past a limit is a validation error.
//
// # on_failure
//
// When a run fails, each on_failure node whose `compensates` node had
// completed runs, in reverse order of completion. An on_failure node has
// the fields of a node plus compensates; its needs may only name other
// on_failure nodes.
//
// # Library
//
// A Library finds pipelines by name in a folder of *.yaml and *.yml files.
package dags
