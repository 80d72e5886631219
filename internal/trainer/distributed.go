package trainer

// Environment variables of torch.distributed's env:// contract, which a
// train node sets on each rank it starts itself (a command trainer with
// processes > 1), the way torchrun would: a program calls
// torch.distributed.init_process_group() with no further arguments.
const (
	// EnvMasterAddr is the address rank 0 listens on for the others (the
	// node's ranks share a host: 127.0.0.1).
	EnvMasterAddr = "MASTER_ADDR"
	// EnvMasterPort is the port rank 0 listens on, free when the node
	// chose it.
	EnvMasterPort = "MASTER_PORT"
	// EnvRank is the process's rank, 0 to WORLD_SIZE-1; rank 0's standard
	// output is the progress stream.
	EnvRank = "RANK"
	// EnvLocalRank is the rank on this host (the same as RANK: one host),
	// e.g. the GPU of CUDA_VISIBLE_DEVICES the rank uses.
	EnvLocalRank = "LOCAL_RANK"
	// EnvWorldSize is the number of ranks.
	EnvWorldSize = "WORLD_SIZE"
	// EnvLocalWorldSize is the number of ranks on this host (all of them).
	EnvLocalWorldSize = "LOCAL_WORLD_SIZE"
)
