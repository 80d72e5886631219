//go:build tools

// This file pins the modules retrain's packages import, so go.mod holds them
// while the packages that use them are being written. Removed once they exist.
package main

import (
	_ "github.com/NVIDIA/go-nvml/pkg/nvml"
	_ "github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	_ "github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	_ "github.com/apache/arrow-go/v18/arrow"
	_ "github.com/apache/iceberg-go"
	_ "github.com/apache/iceberg-go/catalog/glue"
	_ "github.com/apache/iceberg-go/catalog/rest"
	_ "github.com/apache/iceberg-go/catalog/sql"
	_ "github.com/apache/iceberg-go/io/gocloud/s3"
	_ "github.com/apache/iceberg-go/table"
	_ "github.com/aws/aws-sdk-go-v2/config"
	_ "github.com/aws/aws-sdk-go-v2/credentials"
	_ "github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager"
	_ "github.com/aws/aws-sdk-go-v2/service/s3"
	_ "github.com/parquet-go/parquet-go"
	_ "github.com/spf13/cobra"
	_ "github.com/temporalio/ui-server/v2/server"
	_ "github.com/temporalio/ui-server/v2/server/config"
	_ "github.com/versity/versitygw/backend/meta"
	_ "github.com/versity/versitygw/backend/posix"
	_ "github.com/versity/versitygw/embedgw"
	_ "go.temporal.io/api/enums/v1"
	_ "go.temporal.io/sdk/client"
	_ "go.temporal.io/sdk/testsuite"
	_ "go.temporal.io/sdk/worker"
	_ "go.temporal.io/sdk/workflow"
	_ "go.temporal.io/server/common/persistence/sql/sqlplugin/sqlite"
	_ "go.temporal.io/server/temporal"
	_ "gopkg.in/yaml.v3"
	_ "modernc.org/sqlite"
)
