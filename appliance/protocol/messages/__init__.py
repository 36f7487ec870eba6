"""Every API message we speak, one class per API (see :mod:`appliance.protocol.schema`)."""

from __future__ import annotations

from appliance.protocol.messages.admin import (
    AlterConfigs,
    CreatePartitions,
    CreateTopics,
    DeleteTopics,
    DescribeConfigs,
    IncrementalAlterConfigs,
)
from appliance.protocol.messages.core import (
    ApiVersions,
    Fetch,
    InitProducerId,
    ListOffsets,
    Metadata,
    Produce,
)
from appliance.protocol.messages.describe_cluster import DescribeCluster
from appliance.protocol.messages.describe_log_dirs import DescribeLogDirs
from appliance.protocol.messages.describe_producers import DescribeProducers
from appliance.protocol.messages.elect_leaders import ElectLeaders
from appliance.protocol.messages.group import (
    DeleteGroups,
    DescribeGroups,
    FindCoordinator,
    Heartbeat,
    JoinGroup,
    LeaveGroup,
    ListGroups,
    OffsetCommit,
    OffsetDelete,
    OffsetFetch,
    SyncGroup,
)
from appliance.protocol.messages.log_admin import AlterReplicaLogDirs, DeleteRecords
from appliance.protocol.messages.reassignments import (
    AlterPartitionReassignments,
    ListPartitionReassignments,
)
from appliance.protocol.messages.security import (
    AlterUserScramCredentials,
    CreateAcls,
    DeleteAcls,
    DescribeAcls,
    DescribeUserScramCredentials,
    SaslAuthenticate,
    SaslHandshake,
)
from appliance.protocol.messages.transactions import (
    AddOffsetsToTxn,
    AddPartitionsToTxn,
    DescribeTransactions,
    EndTxn,
    ListTransactions,
    TxnOffsetCommit,
    WriteTxnMarkers,
)

__all__ = [
    "ApiVersions", "Metadata", "Produce", "Fetch", "ListOffsets", "InitProducerId",
    "FindCoordinator", "JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup", "OffsetCommit",
    "OffsetFetch", "DescribeGroups", "ListGroups", "DeleteGroups",
    "CreateTopics", "DeleteTopics", "CreatePartitions", "DescribeConfigs", "AlterConfigs",
    "IncrementalAlterConfigs", "OffsetDelete", "DeleteRecords", "AlterReplicaLogDirs",
    "DescribeLogDirs", "DescribeCluster", "DescribeProducers", "ElectLeaders",
    "AlterPartitionReassignments", "ListPartitionReassignments",
    "SaslHandshake", "SaslAuthenticate", "DescribeUserScramCredentials", "AlterUserScramCredentials",
    "DescribeAcls", "CreateAcls", "DeleteAcls",
    "AddPartitionsToTxn", "AddOffsetsToTxn", "EndTxn", "TxnOffsetCommit", "WriteTxnMarkers",
    "DescribeTransactions", "ListTransactions",
]
