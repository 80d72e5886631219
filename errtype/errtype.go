// Package errtype names the error types retrain's nodes and runs fail with:
// the Type of a Temporal ApplicationError. They are strings on the wire: a
// spec's retry.non_retryable lists them, and clients in any language match
// a failed node or run on them, so their values never change.
package errtype

// Error types of a run (the Pipeline workflow's failure).
const (
	// PipelineFailed: a run failed; the details hold its Result.
	PipelineFailed = "PipelineFailed"
	// InvalidPipeline: a spec or params did not validate. Never retried:
	// the same input fails the same way. The run's details hold its Result.
	InvalidPipeline = "InvalidPipeline"
)

// Error types of nodes.
const (
	// NodeFailed: a node failed without an error type of its own.
	NodeFailed = "NodeFailed"
	// BadInput: the node's input can never work. Not retried.
	BadInput = "BadInput"
	// BadOutput: a node's outputs are malformed (a command's
	// $RETRAIN_OUTPUTS file that is too large, not JSON, not an object, or
	// has a key that is reserved or cannot be referred to) or do not match
	// the outputs its spec declares. Not retried: the same program writes
	// the same file.
	BadOutput = "BadOutput"
	// CheckFailed: a check on the data failed; a retry would fail the same
	// way. Not retried.
	CheckFailed = "CheckFailed"
	// GateRejected: a gate with on_reject: fail did not pass.
	GateRejected = "GateRejected"
	// CanaryRolledBack: a canary deploy was rolled back (a check on live
	// metrics breached, or a human rejected it). Not retried; its details
	// hold the node's outputs.
	CanaryRolledBack = "CanaryRolledBack"
	// NoObjectStore: the worker has no object store configured.
	NoObjectStore = "NoObjectStore"
	// ConcurrentMove: a rollback found the alias moved by someone else since
	// the deploy it was to undo, and left it alone; or a rollback_table
	// without the promotion's snapshot found other commits on the table
	// after it, and left the table alone.
	ConcurrentMove = "ConcurrentMove"
	// Superseded: a move of a model alias was refused because the alias
	// names a version trained for a later logical date than the one it
	// would move to (the registry's date rule); `force: true` overrides it.
	Superseded = "Superseded"
	// Diverged: the divergence guard stopped training (NaN or infinite
	// loss, or an embedding norm above the limit). Not retried: the same
	// data and settings diverge again.
	Diverged = "Diverged"
	// NoGPUs: a train node asked for GPUs on a worker that has none.
	NoGPUs = "NoGPUs"
	// PromotionContended: a promote_features node lost the race for its
	// table to other commits features.MaxRounds times in a row.
	PromotionContended = "PromotionContended"
	// TableQueueUnavailable: a promotion could not use its table's queue
	// (enqueue failed, or the workflow under the queue's id is not one a
	// retrain worker started). The promotion goes ahead on the commit's
	// compare-and-swap; the error only reaches the node's log and outputs.
	TableQueueUnavailable = "TableQueueUnavailable"
	// GangIncomplete: fewer hosts than a train node's hosts joined its
	// gang within gang_timeout; their leases were released and no rank
	// started. Retried: workers may come.
	GangIncomplete = "GangIncomplete"
	// GangLost: a gang's host no longer held what it leased when the
	// gang formed (its worker restarted). Retried with a new gang.
	GangLost = "GangLost"
	// RankFailed: a trainer rank exited non-zero or was killed, and every
	// rank was stopped. Retried, resuming from the last checkpoint.
	RankFailed = "RankFailed"
	// RankHung: a trainer rank's step stopped advancing for hang_timeout,
	// and every rank was stopped. Retried, resuming from the last
	// checkpoint.
	RankHung = "RankHung"
	// OverLimit: a train node asked a host for more than the worker's
	// operator allows (processes per host above --max-processes-per-host,
	// hosts above --max-hosts). Nothing started. Never retried.
	OverLimit = "OverLimit"
	// DataNotReady: a wait_for condition still did not hold at its
	// deadline; the message names it and what its last check saw.
	DataNotReady = "DataNotReady"
)

// Refused: a workflow or activity that reached a worker without a
// Pipeline run of that worker's policy behind it (started directly by a
// client, or sent by a run on a task queue the worker does not trust).
// Nothing ran. Never retried.
const Refused = "Refused"
