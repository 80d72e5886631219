package lake

// SetBeforeCompactCommit lets tests land a commit between a compaction's
// rewrite and its commit.
func SetBeforeCompactCommit(o *MaintainOptions, f func(round int)) { o.beforeCompactCommit = f }

// SetBeforeUndoCommit lets tests land a commit between an undo's plan and
// its commit.
func SetBeforeUndoCommit(o *UndoOptions, f func()) { o.beforeCommit = f }
