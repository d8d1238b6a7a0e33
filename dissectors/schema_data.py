"""Every Kafka API key and version: the declarative protocol table.

Written once by tools/gen_schema.py from the protocol's facts (see its docstring for the
sources and how to re-run it), then owned here: edit it by hand like any source file.

F(name, type, versions, ...) is dissectors.schema.FieldDef; ranges are inclusive and ANY
means "and every later version". Tagged fields stay where Kafka declares them; on the wire
they travel in the tagged-field section of their struct, in tag order.
"""
from dissectors.schema import ANY, ApiDef, FieldDef

F = FieldDef

APIS: dict[int, ApiDef] = {}

APIS[0] = ApiDef(0, "Produce", 0, 13, 9, request=(
    F("transactional_id", "string", (3, ANY), nullable=(3, ANY)),
    F("acks", "int16", (0, ANY), meaning="acks"),
    F("timeout_ms", "int32", (0, ANY)),
    F("topic_data", "array", (0, ANY), struct="TopicProduceData", element="struct", fields=(
        F("topic_id", "uuid", (13, ANY), meaning="topic_id"),
        F("name", "string", (0, 12)),
        F("partition_data", "array", (0, ANY), struct="PartitionProduceData", element="struct", fields=(
            F("index", "int32", (0, ANY)),
            F("records", "records", (0, ANY), nullable=(0, ANY)),
        )),
    )),
), response=(
    F("responses", "array", (0, ANY), struct="TopicProduceResponse", element="struct", fields=(
        F("topic_id", "uuid", (13, ANY), meaning="topic_id"),
        F("name", "string", (0, 12)),
        F("partition_responses", "array", (0, ANY), struct="PartitionProduceResponse", element="struct", fields=(
            F("index", "int32", (0, ANY)),
            F("error_code", "int16", (0, ANY), meaning="error_code"),
            F("base_offset", "int64", (0, ANY)),
            F("log_append_time_ms", "int64", (2, ANY), meaning="timestamp_ms"),
            F("log_start_offset", "int64", (5, ANY)),
            F("record_errors", "array", (8, ANY), struct="BatchIndexAndErrorMessage", element="struct", fields=(
                F("batch_index", "int32", (8, ANY)),
                F("batch_index_error_message", "string", (8, ANY), nullable=(8, ANY)),
            )),
            F("error_message", "string", (8, ANY), nullable=(8, ANY)),
            F("current_leader", "struct", (10, ANY), tag=0, tagged=(10, ANY), struct="LeaderIdAndEpoch", fields=(
                F("leader_id", "int32", (10, ANY)),
                F("leader_epoch", "int32", (10, ANY)),
            )),
        )),
    )),
    F("throttle_time_ms", "int32", (1, ANY)),
    F("node_endpoints", "array", (10, ANY), tag=0, tagged=(10, ANY), struct="NodeEndpoint", element="struct", fields=(
        F("node_id", "int32", (10, ANY)),
        F("host", "string", (10, ANY)),
        F("port", "int32", (10, ANY)),
        F("rack", "string", (10, ANY), nullable=(10, ANY)),
    )),
), kafka4_versions=(3, 13), listeners=("broker",))

APIS[1] = ApiDef(1, "Fetch", 0, 18, 12, request=(
    F("cluster_id", "string", (12, ANY), nullable=(12, ANY), tag=0, tagged=(12, ANY)),
    F("replica_state", "struct", (15, ANY), tag=1, tagged=(15, ANY), struct="ReplicaState", fields=(
        F("replica_id", "int32", (15, ANY)),
        F("replica_epoch", "int64", (15, ANY)),
    )),
    F("replica_id", "int32", (0, 14)),
    F("max_wait_ms", "int32", (0, ANY)),
    F("min_bytes", "int32", (0, ANY)),
    F("max_bytes", "int32", (3, ANY)),
    F("isolation_level", "int8", (4, ANY), meaning="isolation_level"),
    F("session_id", "int32", (7, ANY)),
    F("session_epoch", "int32", (7, ANY)),
    F("topics", "array", (0, ANY), struct="FetchTopic", element="struct", fields=(
        F("topic_id", "uuid", (13, ANY), meaning="topic_id"),
        F("topic", "string", (0, 12)),
        F("partitions", "array", (0, ANY), struct="FetchPartition", element="struct", fields=(
            F("partition", "int32", (0, ANY)),
            F("current_leader_epoch", "int32", (9, ANY)),
            F("fetch_offset", "int64", (0, ANY)),
            F("last_fetched_epoch", "int32", (12, ANY)),
            F("log_start_offset", "int64", (5, ANY)),
            F("partition_max_bytes", "int32", (0, ANY)),
            F("replica_directory_id", "uuid", (17, ANY), tag=0, tagged=(17, ANY)),
            F("high_watermark", "int64", (18, ANY), tag=1, tagged=(18, ANY)),
        )),
    )),
    F("forgotten_topics_data", "array", (7, ANY), struct="ForgottenTopic", element="struct", fields=(
        F("topic_id", "uuid", (13, ANY), meaning="topic_id"),
        F("topic", "string", (7, 12)),
        F("partitions", "array", (7, ANY), element="int32"),
    )),
    F("rack_id", "string", (11, ANY)),
), response=(
    F("throttle_time_ms", "int32", (1, ANY)),
    F("error_code", "int16", (7, ANY), meaning="error_code"),
    F("session_id", "int32", (7, ANY)),
    F("responses", "array", (0, ANY), struct="FetchableTopicResponse", element="struct", fields=(
        F("topic_id", "uuid", (13, ANY), meaning="topic_id"),
        F("topic", "string", (0, 12)),
        F("partitions", "array", (0, ANY), struct="PartitionData", element="struct", fields=(
            F("partition_index", "int32", (0, ANY)),
            F("error_code", "int16", (0, ANY), meaning="error_code"),
            F("high_watermark", "int64", (0, ANY)),
            F("last_stable_offset", "int64", (4, ANY)),
            F("log_start_offset", "int64", (5, ANY)),
            F("diverging_epoch", "struct", (12, ANY), tag=0, tagged=(12, ANY), struct="EpochEndOffset", fields=(
                F("epoch", "int32", (12, ANY)),
                F("end_offset", "int64", (12, ANY)),
            )),
            F("current_leader", "struct", (12, ANY), tag=1, tagged=(12, ANY), struct="LeaderIdAndEpoch", fields=(
                F("leader_id", "int32", (12, ANY)),
                F("leader_epoch", "int32", (12, ANY)),
            )),
            F("snapshot_id", "struct", (12, ANY), tag=2, tagged=(12, ANY), struct="SnapshotId", fields=(
                F("end_offset", "int64", (12, ANY)),
                F("epoch", "int32", (12, ANY)),
            )),
            F("aborted_transactions", "array", (4, ANY), nullable=(4, ANY), struct="AbortedTransaction", element="struct", fields=(
                F("producer_id", "int64", (4, ANY)),
                F("first_offset", "int64", (4, ANY)),
            )),
            F("preferred_read_replica", "int32", (11, ANY)),
            F("records", "records", (0, ANY), nullable=(0, ANY)),
        )),
    )),
    F("node_endpoints", "array", (16, ANY), tag=0, tagged=(16, ANY), struct="NodeEndpoint", element="struct", fields=(
        F("node_id", "int32", (16, ANY)),
        F("host", "string", (16, ANY)),
        F("port", "int32", (16, ANY)),
        F("rack", "string", (16, ANY), nullable=(16, ANY)),
    )),
), kafka4_versions=(4, 18), listeners=("broker", "controller"))

APIS[2] = ApiDef(2, "ListOffsets", 0, 11, 6, request=(
    F("replica_id", "int32", (0, ANY)),
    F("isolation_level", "int8", (2, ANY), meaning="isolation_level"),
    F("topics", "array", (0, ANY), struct="ListOffsetsTopic", element="struct", fields=(
        F("name", "string", (0, ANY)),
        F("partitions", "array", (0, ANY), struct="ListOffsetsPartition", element="struct", fields=(
            F("partition_index", "int32", (0, ANY)),
            F("current_leader_epoch", "int32", (4, ANY)),
            F("timestamp", "int64", (0, ANY), meaning="offset_spec"),
            F("max_num_offsets", "int32", (0, 0)),
        )),
    )),
    F("timeout_ms", "int32", (10, ANY)),
), response=(
    F("throttle_time_ms", "int32", (2, ANY)),
    F("topics", "array", (0, ANY), struct="ListOffsetsTopicResponse", element="struct", fields=(
        F("name", "string", (0, ANY)),
        F("partitions", "array", (0, ANY), struct="ListOffsetsPartitionResponse", element="struct", fields=(
            F("partition_index", "int32", (0, ANY)),
            F("error_code", "int16", (0, ANY), meaning="error_code"),
            F("timestamp", "int64", (1, ANY), meaning="timestamp_ms"),
            F("offset", "int64", (1, ANY)),
            F("leader_epoch", "int32", (4, ANY)),
            F("old_style_offsets", "array", (0, 0), element="int64"),
        )),
    )),
), kafka4_versions=(1, 11), listeners=("broker",))

APIS[3] = ApiDef(3, "Metadata", 0, 13, 9, request=(
    F("topics", "array", (0, ANY), nullable=(1, ANY), struct="MetadataRequestTopic", element="struct", fields=(
        F("topic_id", "uuid", (10, ANY), meaning="topic_id"),
        F("name", "string", (0, ANY), nullable=(10, ANY)),
    )),
    F("allow_auto_topic_creation", "bool", (4, ANY)),
    F("include_cluster_authorized_operations", "bool", (8, 10)),
    F("include_topic_authorized_operations", "bool", (8, ANY)),
), response=(
    F("throttle_time_ms", "int32", (3, ANY)),
    F("brokers", "array", (0, ANY), struct="MetadataResponseBroker", element="struct", fields=(
        F("node_id", "int32", (0, ANY)),
        F("host", "string", (0, ANY)),
        F("port", "int32", (0, ANY)),
        F("rack", "string", (1, ANY), nullable=(1, ANY)),
    )),
    F("cluster_id", "string", (2, ANY), nullable=(2, ANY)),
    F("controller_id", "int32", (1, ANY)),
    F("topics", "array", (0, ANY), struct="MetadataResponseTopic", element="struct", fields=(
        F("error_code", "int16", (0, ANY), meaning="error_code"),
        F("name", "string", (0, ANY), nullable=(12, ANY)),
        F("topic_id", "uuid", (10, ANY), meaning="topic_id"),
        F("is_internal", "bool", (1, ANY)),
        F("partitions", "array", (0, ANY), struct="MetadataResponsePartition", element="struct", fields=(
            F("error_code", "int16", (0, ANY), meaning="error_code"),
            F("partition_index", "int32", (0, ANY)),
            F("leader_id", "int32", (0, ANY)),
            F("leader_epoch", "int32", (7, ANY)),
            F("replica_nodes", "array", (0, ANY), element="int32"),
            F("isr_nodes", "array", (0, ANY), element="int32"),
            F("offline_replicas", "array", (5, ANY), element="int32"),
        )),
        F("topic_authorized_operations", "int32", (8, ANY)),
    )),
    F("error_code", "int16", (13, ANY), meaning="error_code"),
    F("cluster_authorized_operations", "int32", (8, 10)),
), kafka4_versions=(0, 13), listeners=("broker",))

APIS[4] = ApiDef(4, "LeaderAndIsr", 0, 7, 4, request=(
    F("controller_id", "int32", (0, ANY)),
    F("is_kraft_controller", "bool", (7, ANY)),
    F("controller_epoch", "int32", (0, ANY)),
    F("broker_epoch", "int64", (2, ANY)),
    F("type", "int8", (5, ANY)),
    F("topic_states", "array", (2, ANY), struct="LeaderAndIsrTopicState", element="struct", fields=(
        F("topic_name", "string", (2, ANY)),
        F("topic_id", "uuid", (5, ANY), meaning="topic_id"),
        F("partition_states", "array", (2, ANY), struct="LeaderAndIsrPartitionState", element="struct", fields=(
            F("partition_index", "int32", (2, ANY)),
            F("controller_epoch", "int32", (2, ANY)),
            F("leader", "int32", (2, ANY)),
            F("leader_epoch", "int32", (2, ANY)),
            F("isr", "array", (2, ANY), element="int32"),
            F("partition_epoch", "int32", (2, ANY)),
            F("replicas", "array", (2, ANY), element="int32"),
            F("adding_replicas", "array", (3, ANY), element="int32"),
            F("removing_replicas", "array", (3, ANY), element="int32"),
            F("is_new", "bool", (2, ANY)),
            F("leader_recovery_state", "int8", (6, ANY)),
        )),
    )),
    F("ungrouped_partition_states", "array", (0, 1), struct="LeaderAndIsrPartitionState", element="struct", fields=(
        F("topic_name", "string", (0, 1)),
        F("partition_index", "int32", (0, 1)),
        F("controller_epoch", "int32", (0, 1)),
        F("leader", "int32", (0, 1)),
        F("leader_epoch", "int32", (0, 1)),
        F("isr", "array", (0, 1), element="int32"),
        F("partition_epoch", "int32", (0, 1)),
        F("replicas", "array", (0, 1), element="int32"),
        F("is_new", "bool", (1, 1)),
    )),
    F("live_leaders", "array", (0, ANY), struct="LeaderAndIsrLiveLeader", element="struct", fields=(
        F("broker_id", "int32", (0, ANY)),
        F("host_name", "string", (0, ANY)),
        F("port", "int32", (0, ANY)),
    )),
), response=(
    F("error_code", "int16", (0, ANY), meaning="error_code"),
    F("topics", "array", (5, ANY), struct="LeaderAndIsrTopicError", element="struct", fields=(
        F("topic_id", "uuid", (5, ANY), meaning="topic_id"),
        F("partition_errors", "array", (5, ANY), struct="LeaderAndIsrPartitionError", element="struct", fields=(
            F("partition_index", "int32", (5, ANY)),
            F("error_code", "int16", (5, ANY), meaning="error_code"),
        )),
    )),
    F("partition_errors", "array", (0, 4), struct="LeaderAndIsrPartitionError", element="struct", fields=(
        F("topic_name", "string", (0, 4)),
        F("partition_index", "int32", (0, 4)),
        F("error_code", "int16", (0, 4), meaning="error_code"),
    )),
), kafka4_versions=None, listeners=("zkBroker",))

APIS[5] = ApiDef(5, "StopReplica", 0, 4, 2, request=(
    F("controller_id", "int32", (0, ANY)),
    F("is_kraft_controller", "bool", (4, ANY)),
    F("controller_epoch", "int32", (0, ANY)),
    F("broker_epoch", "int64", (1, ANY)),
    F("topic_states", "array", (3, ANY), struct="StopReplicaTopicState", element="struct", fields=(
        F("topic_name", "string", (3, ANY)),
        F("partition_states", "array", (3, ANY), struct="StopReplicaPartitionState", element="struct", fields=(
            F("partition_index", "int32", (3, ANY)),
            F("leader_epoch", "int32", (3, ANY)),
            F("delete_partition", "bool", (3, ANY)),
        )),
    )),
    F("delete_partitions", "bool", (0, 2)),
    F("topics", "array", (1, 2), struct="StopReplicaTopicV1", element="struct", fields=(
        F("name", "string", (1, 2)),
        F("partition_indexes", "array", (1, 2), element="int32"),
    )),
    F("ungrouped_partitions", "array", (0, 0), struct="StopReplicaPartitionV0", element="struct", fields=(
        F("topic_name", "string", (0, 0)),
        F("partition_index", "int32", (0, 0)),
    )),
), response=(
    F("error_code", "int16", (0, ANY), meaning="error_code"),
    F("partition_errors", "array", (0, ANY), struct="StopReplicaPartitionError", element="struct", fields=(
        F("topic_name", "string", (0, ANY)),
        F("partition_index", "int32", (0, ANY)),
        F("error_code", "int16", (0, ANY), meaning="error_code"),
    )),
), kafka4_versions=None, listeners=("zkBroker",))

APIS[6] = ApiDef(6, "UpdateMetadata", 0, 8, 6, request=(
    F("controller_id", "int32", (0, ANY)),
    F("is_kraft_controller", "bool", (8, ANY)),
    F("type", "int8", (8, ANY), tag=0, tagged=(8, ANY)),
    F("controller_epoch", "int32", (0, ANY)),
    F("broker_epoch", "int64", (5, ANY)),
    F("topic_states", "array", (5, ANY), struct="UpdateMetadataTopicState", element="struct", fields=(
        F("topic_name", "string", (5, ANY)),
        F("topic_id", "uuid", (7, ANY), meaning="topic_id"),
        F("partition_states", "array", (5, ANY), struct="UpdateMetadataPartitionState", element="struct", fields=(
            F("partition_index", "int32", (5, ANY)),
            F("controller_epoch", "int32", (5, ANY)),
            F("leader", "int32", (5, ANY)),
            F("leader_epoch", "int32", (5, ANY)),
            F("isr", "array", (5, ANY), element="int32"),
            F("zk_version", "int32", (5, ANY)),
            F("replicas", "array", (5, ANY), element="int32"),
            F("offline_replicas", "array", (5, ANY), element="int32"),
        )),
    )),
    F("ungrouped_partition_states", "array", (0, 4), struct="UpdateMetadataPartitionState", element="struct", fields=(
        F("topic_name", "string", (0, 4)),
        F("partition_index", "int32", (0, 4)),
        F("controller_epoch", "int32", (0, 4)),
        F("leader", "int32", (0, 4)),
        F("leader_epoch", "int32", (0, 4)),
        F("isr", "array", (0, 4), element="int32"),
        F("zk_version", "int32", (0, 4)),
        F("replicas", "array", (0, 4), element="int32"),
        F("offline_replicas", "array", (4, 4), element="int32"),
    )),
    F("live_brokers", "array", (0, ANY), struct="UpdateMetadataBroker", element="struct", fields=(
        F("id", "int32", (0, ANY)),
        F("endpoints", "array", (1, ANY), struct="UpdateMetadataEndpoint", element="struct", fields=(
            F("port", "int32", (1, ANY)),
            F("host", "string", (1, ANY)),
            F("listener", "string", (3, ANY)),
            F("security_protocol", "int16", (1, ANY)),
        )),
        F("rack", "string", (2, ANY), nullable=(2, ANY)),
        F("v0_host", "string", (0, 0)),
        F("v0_port", "int32", (0, 0)),
    )),
), response=(
    F("error_code", "int16", (0, ANY), meaning="error_code"),
), kafka4_versions=None, listeners=("zkBroker",))

APIS[7] = ApiDef(7, "ControlledShutdown", 0, 3, 3, request=(
    F("broker_id", "int32", (0, ANY)),
    F("broker_epoch", "int64", (2, ANY)),
), response=(
    F("error_code", "int16", (0, ANY), meaning="error_code"),
    F("remaining_partitions", "array", (0, ANY), struct="RemainingPartition", element="struct", fields=(
        F("topic_name", "string", (0, ANY)),
        F("partition_index", "int32", (0, ANY)),
    )),
), kafka4_versions=None, listeners=("zkBroker", "controller"))

APIS[8] = ApiDef(8, "OffsetCommit", 0, 10, 8, request=(
    F("group_id", "string", (0, ANY)),
    F("generation_id_or_member_epoch", "int32", (1, ANY)),
    F("member_id", "string", (1, ANY)),
    F("group_instance_id", "string", (7, ANY), nullable=(7, ANY)),
    F("retention_time_ms", "int64", (2, 4)),
    F("topics", "array", (0, ANY), struct="OffsetCommitRequestTopic", element="struct", fields=(
        F("topic_id", "uuid", (10, ANY), meaning="topic_id"),
        F("name", "string", (0, 9)),
        F("partitions", "array", (0, ANY), struct="OffsetCommitRequestPartition", element="struct", fields=(
            F("partition_index", "int32", (0, ANY)),
            F("committed_offset", "int64", (0, ANY)),
            F("committed_leader_epoch", "int32", (6, ANY)),
            F("commit_timestamp", "int64", (1, 1), meaning="timestamp_ms"),
            F("committed_metadata", "string", (0, ANY), nullable=(0, ANY)),
        )),
    )),
), response=(
    F("throttle_time_ms", "int32", (3, ANY)),
    F("topics", "array", (0, ANY), struct="OffsetCommitResponseTopic", element="struct", fields=(
        F("topic_id", "uuid", (10, ANY), meaning="topic_id"),
        F("name", "string", (0, 9)),
        F("partitions", "array", (0, ANY), struct="OffsetCommitResponsePartition", element="struct", fields=(
            F("partition_index", "int32", (0, ANY)),
            F("error_code", "int16", (0, ANY), meaning="error_code"),
        )),
    )),
), kafka4_versions=(2, 10), listeners=("broker",))

APIS[9] = ApiDef(9, "OffsetFetch", 0, 10, 6, request=(
    F("groups", "array", (8, ANY), struct="OffsetFetchRequestGroup", element="struct", fields=(
        F("group_id", "string", (8, ANY)),
        F("member_id", "string", (9, ANY), nullable=(9, ANY)),
        F("member_epoch", "int32", (9, ANY)),
        F("topics", "array", (8, ANY), nullable=(8, ANY), struct="OffsetFetchRequestTopics", element="struct", fields=(
            F("topic_id", "uuid", (10, ANY), meaning="topic_id"),
            F("name", "string", (8, 9)),
            F("partition_indexes", "array", (8, ANY), element="int32"),
        )),
    )),
    F("group_id", "string", (0, 7)),
    F("topics", "array", (0, 7), nullable=(2, 7), struct="OffsetFetchRequestTopic", element="struct", fields=(
        F("name", "string", (0, 7)),
        F("partition_indexes", "array", (0, 7), element="int32"),
    )),
    F("require_stable", "bool", (7, ANY)),
), response=(
    F("throttle_time_ms", "int32", (3, ANY)),
    F("groups", "array", (8, ANY), struct="OffsetFetchResponseGroup", element="struct", fields=(
        F("group_id", "string", (8, ANY)),
        F("topics", "array", (8, ANY), struct="OffsetFetchResponseTopics", element="struct", fields=(
            F("topic_id", "uuid", (10, ANY), meaning="topic_id"),
            F("name", "string", (8, 9)),
            F("partitions", "array", (8, ANY), struct="OffsetFetchResponsePartitions", element="struct", fields=(
                F("partition_index", "int32", (8, ANY)),
                F("committed_offset", "int64", (8, ANY)),
                F("committed_leader_epoch", "int32", (8, ANY)),
                F("metadata", "string", (8, ANY), nullable=(8, ANY)),
                F("error_code", "int16", (8, ANY), meaning="error_code"),
            )),
        )),
        F("error_code", "int16", (8, ANY), meaning="error_code"),
    )),
    F("topics", "array", (0, 7), struct="OffsetFetchResponseTopic", element="struct", fields=(
        F("name", "string", (0, 7)),
        F("partitions", "array", (0, 7), struct="OffsetFetchResponsePartition", element="struct", fields=(
            F("partition_index", "int32", (0, 7)),
            F("committed_offset", "int64", (0, 7)),
            F("committed_leader_epoch", "int32", (5, 7)),
            F("metadata", "string", (0, 7), nullable=(0, 7)),
            F("error_code", "int16", (0, 7), meaning="error_code"),
        )),
    )),
    F("error_code", "int16", (2, 7), meaning="error_code"),
), kafka4_versions=(1, 10), listeners=("broker",))

APIS[10] = ApiDef(10, "FindCoordinator", 0, 6, 3, request=(
    F("key", "string", (0, 3)),
    F("key_type", "int8", (1, ANY), meaning="coordinator_type"),
    F("coordinator_keys", "array", (4, ANY), element="string"),
), response=(
    F("throttle_time_ms", "int32", (1, ANY)),
    F("coordinators", "array", (4, ANY), struct="Coordinator", element="struct", fields=(
        F("key", "string", (4, ANY)),
        F("node_id", "int32", (4, ANY)),
        F("host", "string", (4, ANY)),
        F("port", "int32", (4, ANY)),
        F("error_code", "int16", (4, ANY), meaning="error_code"),
        F("error_message", "string", (4, ANY), nullable=(4, ANY)),
    )),
    F("error_code", "int16", (0, 3), meaning="error_code"),
    F("error_message", "string", (1, 3), nullable=(1, 3)),
    F("node_id", "int32", (0, 3)),
    F("host", "string", (0, 3)),
    F("port", "int32", (0, 3)),
), kafka4_versions=(0, 6), listeners=("broker",))

APIS[11] = ApiDef(11, "JoinGroup", 0, 9, 6, request=(
    F("group_id", "string", (0, ANY)),
    F("session_timeout_ms", "int32", (0, ANY)),
    F("rebalance_timeout_ms", "int32", (1, ANY)),
    F("member_id", "string", (0, ANY)),
    F("group_instance_id", "string", (5, ANY), nullable=(5, ANY)),
    F("protocol_type", "string", (0, ANY)),
    F("protocols", "array", (0, ANY), struct="JoinGroupRequestProtocol", element="struct", fields=(
        F("name", "string", (0, ANY)),
        F("metadata", "bytes", (0, ANY), meaning="consumer_subscription"),
    )),
    F("reason", "string", (8, ANY), nullable=(8, ANY)),
), response=(
    F("throttle_time_ms", "int32", (2, ANY)),
    F("error_code", "int16", (0, ANY), meaning="error_code"),
    F("generation_id", "int32", (0, ANY)),
    F("protocol_type", "string", (7, ANY), nullable=(7, ANY)),
    F("protocol_name", "string", (0, ANY), nullable=(7, ANY)),
    F("leader", "string", (0, ANY)),
    F("skip_assignment", "bool", (9, ANY)),
    F("member_id", "string", (0, ANY)),
    F("members", "array", (0, ANY), struct="JoinGroupResponseMember", element="struct", fields=(
        F("member_id", "string", (0, ANY)),
        F("group_instance_id", "string", (5, ANY), nullable=(5, ANY)),
        F("metadata", "bytes", (0, ANY), meaning="consumer_subscription"),
    )),
), kafka4_versions=(0, 9), listeners=("broker",))

APIS[12] = ApiDef(12, "Heartbeat", 0, 4, 4, request=(
    F("group_id", "string", (0, ANY)),
    F("generation_id", "int32", (0, ANY)),
    F("member_id", "string", (0, ANY)),
    F("group_instance_id", "string", (3, ANY), nullable=(3, ANY)),
), response=(
    F("throttle_time_ms", "int32", (1, ANY)),
    F("error_code", "int16", (0, ANY), meaning="error_code"),
), kafka4_versions=(0, 4), listeners=("broker",))

APIS[13] = ApiDef(13, "LeaveGroup", 0, 5, 4, request=(
    F("group_id", "string", (0, ANY)),
    F("members", "array", (3, ANY), struct="MemberIdentity", element="struct", fields=(
        F("member_id", "string", (3, ANY)),
        F("group_instance_id", "string", (3, ANY), nullable=(3, ANY)),
        F("reason", "string", (5, ANY), nullable=(5, ANY)),
    )),
    F("member_id", "string", (0, 2)),
), response=(
    F("throttle_time_ms", "int32", (1, ANY)),
    F("error_code", "int16", (0, ANY), meaning="error_code"),
    F("members", "array", (3, ANY), struct="MemberResponse", element="struct", fields=(
        F("member_id", "string", (3, ANY)),
        F("group_instance_id", "string", (3, ANY), nullable=(3, ANY)),
        F("error_code", "int16", (3, ANY), meaning="error_code"),
    )),
), kafka4_versions=(0, 5), listeners=("broker",))

APIS[14] = ApiDef(14, "SyncGroup", 0, 5, 4, request=(
    F("group_id", "string", (0, ANY)),
    F("generation_id", "int32", (0, ANY)),
    F("member_id", "string", (0, ANY)),
    F("group_instance_id", "string", (3, ANY), nullable=(3, ANY)),
    F("protocol_type", "string", (5, ANY), nullable=(5, ANY)),
    F("protocol_name", "string", (5, ANY), nullable=(5, ANY)),
    F("assignments", "array", (0, ANY), struct="SyncGroupRequestAssignment", element="struct", fields=(
        F("member_id", "string", (0, ANY)),
        F("assignment", "bytes", (0, ANY), meaning="consumer_assignment"),
    )),
), response=(
    F("throttle_time_ms", "int32", (1, ANY)),
    F("error_code", "int16", (0, ANY), meaning="error_code"),
    F("protocol_type", "string", (5, ANY), nullable=(5, ANY)),
    F("protocol_name", "string", (5, ANY), nullable=(5, ANY)),
    F("assignment", "bytes", (0, ANY), meaning="consumer_assignment"),
), kafka4_versions=(0, 5), listeners=("broker",))

APIS[15] = ApiDef(15, "DescribeGroups", 0, 6, 5, request=(
    F("groups", "array", (0, ANY), element="string"),
    F("include_authorized_operations", "bool", (3, ANY)),
), response=(
    F("throttle_time_ms", "int32", (1, ANY)),
    F("groups", "array", (0, ANY), struct="DescribedGroup", element="struct", fields=(
        F("error_code", "int16", (0, ANY), meaning="error_code"),
        F("error_message", "string", (6, ANY), nullable=(6, ANY)),
        F("group_id", "string", (0, ANY)),
        F("group_state", "string", (0, ANY)),
        F("protocol_type", "string", (0, ANY)),
        F("protocol_data", "string", (0, ANY)),
        F("members", "array", (0, ANY), struct="DescribedGroupMember", element="struct", fields=(
            F("member_id", "string", (0, ANY)),
            F("group_instance_id", "string", (4, ANY), nullable=(4, ANY)),
            F("client_id", "string", (0, ANY)),
            F("client_host", "string", (0, ANY)),
            F("member_metadata", "bytes", (0, ANY), meaning="consumer_subscription"),
            F("member_assignment", "bytes", (0, ANY), meaning="consumer_assignment"),
        )),
        F("authorized_operations", "int32", (3, ANY)),
    )),
), kafka4_versions=(0, 6), listeners=("broker",))

APIS[16] = ApiDef(16, "ListGroups", 0, 5, 3, request=(
    F("states_filter", "array", (4, ANY), element="string"),
    F("types_filter", "array", (5, ANY), element="string"),
), response=(
    F("throttle_time_ms", "int32", (1, ANY)),
    F("error_code", "int16", (0, ANY), meaning="error_code"),
    F("groups", "array", (0, ANY), struct="ListedGroup", element="struct", fields=(
        F("group_id", "string", (0, ANY)),
        F("protocol_type", "string", (0, ANY)),
        F("group_state", "string", (4, ANY)),
        F("group_type", "string", (5, ANY)),
    )),
), kafka4_versions=(0, 5), listeners=("broker",))

APIS[17] = ApiDef(17, "SaslHandshake", 0, 1, None, request=(
    F("mechanism", "string", (0, ANY)),
), response=(
    F("error_code", "int16", (0, ANY), meaning="error_code"),
    F("mechanisms", "array", (0, ANY), element="string"),
), kafka4_versions=(0, 1), listeners=("broker", "controller"))

APIS[18] = ApiDef(18, "ApiVersions", 0, 5, 3, request=(
    F("client_software_name", "string", (3, ANY)),
    F("client_software_version", "string", (3, ANY)),
    F("cluster_id", "string", (5, ANY), nullable=(5, ANY)),
    F("node_id", "int32", (5, ANY)),
), response=(
    F("error_code", "int16", (0, ANY), meaning="error_code"),
    F("api_keys", "array", (0, ANY), struct="ApiVersion", element="struct", fields=(
        F("api_key", "int16", (0, ANY), meaning="api_key"),
        F("min_version", "int16", (0, ANY)),
        F("max_version", "int16", (0, ANY)),
    )),
    F("throttle_time_ms", "int32", (1, ANY)),
    F("supported_features", "array", (3, ANY), tag=0, tagged=(3, ANY), struct="SupportedFeatureKey", element="struct", fields=(
        F("name", "string", (3, ANY)),
        F("min_version", "int16", (3, ANY)),
        F("max_version", "int16", (3, ANY)),
    )),
    F("finalized_features_epoch", "int64", (3, ANY), tag=1, tagged=(3, ANY)),
    F("finalized_features", "array", (3, ANY), tag=2, tagged=(3, ANY), struct="FinalizedFeatureKey", element="struct", fields=(
        F("name", "string", (3, ANY)),
        F("max_version_level", "int16", (3, ANY)),
        F("min_version_level", "int16", (3, ANY)),
    )),
    F("zk_migration_ready", "bool", (3, ANY), tag=3, tagged=(3, ANY)),
), kafka4_versions=(0, 5), listeners=("broker", "controller"))

APIS[19] = ApiDef(19, "CreateTopics", 0, 7, 5, request=(
    F("topics", "array", (0, ANY), struct="CreatableTopic", element="struct", fields=(
        F("name", "string", (0, ANY)),
        F("num_partitions", "int32", (0, ANY)),
        F("replication_factor", "int16", (0, ANY)),
        F("assignments", "array", (0, ANY), struct="CreatableReplicaAssignment", element="struct", fields=(
            F("partition_index", "int32", (0, ANY)),
            F("broker_ids", "array", (0, ANY), element="int32"),
        )),
        F("configs", "array", (0, ANY), struct="CreatableTopicConfig", element="struct", fields=(
            F("name", "string", (0, ANY)),
            F("value", "string", (0, ANY), nullable=(0, ANY), meaning="config_value"),
        )),
    )),
    F("timeout_ms", "int32", (0, ANY)),
    F("validate_only", "bool", (1, ANY)),
), response=(
    F("throttle_time_ms", "int32", (2, ANY)),
    F("topics", "array", (0, ANY), struct="CreatableTopicResult", element="struct", fields=(
        F("name", "string", (0, ANY)),
        F("topic_id", "uuid", (7, ANY), meaning="topic_id"),
        F("error_code", "int16", (0, ANY), meaning="error_code"),
        F("error_message", "string", (1, ANY), nullable=(1, ANY)),
        F("topic_config_error_code", "int16", (5, ANY), tag=0, tagged=(5, ANY), meaning="error_code"),
        F("num_partitions", "int32", (5, ANY)),
        F("replication_factor", "int16", (5, ANY)),
        F("configs", "array", (5, ANY), nullable=(5, ANY), struct="CreatableTopicConfigs", element="struct", fields=(
            F("name", "string", (5, ANY)),
            F("value", "string", (5, ANY), nullable=(5, ANY), meaning="config_value"),
            F("read_only", "bool", (5, ANY)),
            F("config_source", "int8", (5, ANY), meaning="config_source"),
            F("is_sensitive", "bool", (5, ANY)),
        )),
    )),
), kafka4_versions=(2, 7), listeners=("broker", "controller"))

APIS[20] = ApiDef(20, "DeleteTopics", 0, 6, 4, request=(
    F("topics", "array", (6, ANY), struct="DeleteTopicState", element="struct", fields=(
        F("name", "string", (6, ANY), nullable=(6, ANY)),
        F("topic_id", "uuid", (6, ANY), meaning="topic_id"),
    )),
    F("topic_names", "array", (0, 5), element="string"),
    F("timeout_ms", "int32", (0, ANY)),
), response=(
    F("throttle_time_ms", "int32", (1, ANY)),
    F("responses", "array", (0, ANY), struct="DeletableTopicResult", element="struct", fields=(
        F("name", "string", (0, ANY), nullable=(6, ANY)),
        F("topic_id", "uuid", (6, ANY), meaning="topic_id"),
        F("error_code", "int16", (0, ANY), meaning="error_code"),
        F("error_message", "string", (5, ANY), nullable=(5, ANY)),
    )),
), kafka4_versions=(1, 6), listeners=("broker", "controller"))

APIS[21] = ApiDef(21, "DeleteRecords", 0, 2, 2, request=(
    F("topics", "array", (0, ANY), struct="DeleteRecordsTopic", element="struct", fields=(
        F("name", "string", (0, ANY)),
        F("partitions", "array", (0, ANY), struct="DeleteRecordsPartition", element="struct", fields=(
            F("partition_index", "int32", (0, ANY)),
            F("offset", "int64", (0, ANY)),
        )),
    )),
    F("timeout_ms", "int32", (0, ANY)),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("topics", "array", (0, ANY), struct="DeleteRecordsTopicResult", element="struct", fields=(
        F("name", "string", (0, ANY)),
        F("partitions", "array", (0, ANY), struct="DeleteRecordsPartitionResult", element="struct", fields=(
            F("partition_index", "int32", (0, ANY)),
            F("low_watermark", "int64", (0, ANY)),
            F("error_code", "int16", (0, ANY), meaning="error_code"),
        )),
    )),
), kafka4_versions=(0, 2), listeners=("broker",))

APIS[22] = ApiDef(22, "InitProducerId", 0, 6, 2, request=(
    F("transactional_id", "string", (0, ANY), nullable=(0, ANY)),
    F("transaction_timeout_ms", "int32", (0, ANY)),
    F("producer_id", "int64", (3, ANY)),
    F("producer_epoch", "int16", (3, ANY)),
    F("enable_2pc", "bool", (6, ANY)),
    F("keep_prepared_txn", "bool", (6, ANY)),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("error_code", "int16", (0, ANY), meaning="error_code"),
    F("producer_id", "int64", (0, ANY)),
    F("producer_epoch", "int16", (0, ANY)),
    F("ongoing_txn_producer_id", "int64", (6, ANY)),
    F("ongoing_txn_producer_epoch", "int16", (6, ANY)),
), kafka4_versions=(0, 6), listeners=("broker",))

APIS[23] = ApiDef(23, "OffsetForLeaderEpoch", 0, 4, 4, request=(
    F("replica_id", "int32", (3, ANY)),
    F("topics", "array", (0, ANY), struct="OffsetForLeaderTopic", element="struct", fields=(
        F("topic", "string", (0, ANY)),
        F("partitions", "array", (0, ANY), struct="OffsetForLeaderPartition", element="struct", fields=(
            F("partition", "int32", (0, ANY)),
            F("current_leader_epoch", "int32", (2, ANY)),
            F("leader_epoch", "int32", (0, ANY)),
        )),
    )),
), response=(
    F("throttle_time_ms", "int32", (2, ANY)),
    F("topics", "array", (0, ANY), struct="OffsetForLeaderTopicResult", element="struct", fields=(
        F("topic", "string", (0, ANY)),
        F("partitions", "array", (0, ANY), struct="EpochEndOffset", element="struct", fields=(
            F("error_code", "int16", (0, ANY), meaning="error_code"),
            F("partition", "int32", (0, ANY)),
            F("leader_epoch", "int32", (1, ANY)),
            F("end_offset", "int64", (0, ANY)),
        )),
    )),
), kafka4_versions=(2, 4), listeners=("broker",))

APIS[24] = ApiDef(24, "AddPartitionsToTxn", 0, 5, 3, request=(
    F("transactions", "array", (4, ANY), struct="AddPartitionsToTxnTransaction", element="struct", fields=(
        F("transactional_id", "string", (4, ANY)),
        F("producer_id", "int64", (4, ANY)),
        F("producer_epoch", "int16", (4, ANY)),
        F("verify_only", "bool", (4, ANY)),
        F("topics", "array", (4, ANY), struct="AddPartitionsToTxnTopic", element="struct", fields=(
            F("name", "string", (4, ANY)),
            F("partitions", "array", (4, ANY), element="int32"),
        )),
    )),
    F("v3_and_below_transactional_id", "string", (0, 3)),
    F("v3_and_below_producer_id", "int64", (0, 3)),
    F("v3_and_below_producer_epoch", "int16", (0, 3)),
    F("v3_and_below_topics", "array", (0, 3), struct="AddPartitionsToTxnTopic", element="struct", fields=(
        F("name", "string", (0, 3)),
        F("partitions", "array", (0, 3), element="int32"),
    )),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("error_code", "int16", (4, ANY), meaning="error_code"),
    F("results_by_transaction", "array", (4, ANY), struct="AddPartitionsToTxnResult", element="struct", fields=(
        F("transactional_id", "string", (4, ANY)),
        F("topic_results", "array", (4, ANY), struct="AddPartitionsToTxnTopicResult", element="struct", fields=(
            F("name", "string", (4, ANY)),
            F("results_by_partition", "array", (4, ANY), struct="AddPartitionsToTxnPartitionResult", element="struct", fields=(
                F("partition_index", "int32", (4, ANY)),
                F("partition_error_code", "int16", (4, ANY), meaning="error_code"),
            )),
        )),
    )),
    F("results_by_topic_v3_and_below", "array", (0, 3), struct="AddPartitionsToTxnTopicResult", element="struct", fields=(
        F("name", "string", (0, 3)),
        F("results_by_partition", "array", (0, 3), struct="AddPartitionsToTxnPartitionResult", element="struct", fields=(
            F("partition_index", "int32", (0, 3)),
            F("partition_error_code", "int16", (0, 3), meaning="error_code"),
        )),
    )),
), kafka4_versions=(0, 5), listeners=("broker",))

APIS[25] = ApiDef(25, "AddOffsetsToTxn", 0, 4, 3, request=(
    F("transactional_id", "string", (0, ANY)),
    F("producer_id", "int64", (0, ANY)),
    F("producer_epoch", "int16", (0, ANY)),
    F("group_id", "string", (0, ANY)),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("error_code", "int16", (0, ANY), meaning="error_code"),
), kafka4_versions=(0, 4), listeners=("broker",))

APIS[26] = ApiDef(26, "EndTxn", 0, 5, 3, request=(
    F("transactional_id", "string", (0, ANY)),
    F("producer_id", "int64", (0, ANY)),
    F("producer_epoch", "int16", (0, ANY)),
    F("committed", "bool", (0, ANY)),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("error_code", "int16", (0, ANY), meaning="error_code"),
    F("producer_id", "int64", (5, ANY)),
    F("producer_epoch", "int16", (5, ANY)),
), kafka4_versions=(0, 5), listeners=("broker",))

APIS[27] = ApiDef(27, "WriteTxnMarkers", 0, 2, 1, request=(
    F("markers", "array", (0, ANY), struct="WritableTxnMarker", element="struct", fields=(
        F("producer_id", "int64", (0, ANY)),
        F("producer_epoch", "int16", (0, ANY)),
        F("transaction_result", "bool", (0, ANY)),
        F("topics", "array", (0, ANY), struct="WritableTxnMarkerTopic", element="struct", fields=(
            F("name", "string", (0, ANY)),
            F("partition_indexes", "array", (0, ANY), element="int32"),
        )),
        F("coordinator_epoch", "int32", (0, ANY)),
        F("transaction_version", "int8", (2, ANY)),
    )),
), response=(
    F("markers", "array", (0, ANY), struct="WritableTxnMarkerResult", element="struct", fields=(
        F("producer_id", "int64", (0, ANY)),
        F("topics", "array", (0, ANY), struct="WritableTxnMarkerTopicResult", element="struct", fields=(
            F("name", "string", (0, ANY)),
            F("partitions", "array", (0, ANY), struct="WritableTxnMarkerPartitionResult", element="struct", fields=(
                F("partition_index", "int32", (0, ANY)),
                F("error_code", "int16", (0, ANY), meaning="error_code"),
            )),
        )),
    )),
), kafka4_versions=(1, 2), listeners=("broker",))

APIS[28] = ApiDef(28, "TxnOffsetCommit", 0, 6, 3, request=(
    F("transactional_id", "string", (0, ANY)),
    F("group_id", "string", (0, ANY)),
    F("producer_id", "int64", (0, ANY)),
    F("producer_epoch", "int16", (0, ANY)),
    F("generation_id_or_member_epoch", "int32", (3, ANY)),
    F("member_id", "string", (3, ANY)),
    F("group_instance_id", "string", (3, ANY), nullable=(3, ANY)),
    F("topics", "array", (0, ANY), struct="TxnOffsetCommitRequestTopic", element="struct", fields=(
        F("topic_id", "uuid", (6, ANY), meaning="topic_id"),
        F("name", "string", (0, 5)),
        F("partitions", "array", (0, ANY), struct="TxnOffsetCommitRequestPartition", element="struct", fields=(
            F("partition_index", "int32", (0, ANY)),
            F("committed_offset", "int64", (0, ANY)),
            F("committed_leader_epoch", "int32", (2, ANY)),
            F("committed_metadata", "string", (0, ANY), nullable=(0, ANY)),
        )),
    )),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("topics", "array", (0, ANY), struct="TxnOffsetCommitResponseTopic", element="struct", fields=(
        F("topic_id", "uuid", (6, ANY), meaning="topic_id"),
        F("name", "string", (0, 5)),
        F("partitions", "array", (0, ANY), struct="TxnOffsetCommitResponsePartition", element="struct", fields=(
            F("partition_index", "int32", (0, ANY)),
            F("error_code", "int16", (0, ANY), meaning="error_code"),
        )),
    )),
), kafka4_versions=(0, 6), listeners=("broker",))

APIS[29] = ApiDef(29, "DescribeAcls", 0, 3, 2, request=(
    F("resource_type_filter", "int8", (0, ANY), meaning="resource_type"),
    F("resource_name_filter", "string", (0, ANY), nullable=(0, ANY)),
    F("pattern_type_filter", "int8", (1, ANY), meaning="pattern_type"),
    F("principal_filter", "string", (0, ANY), nullable=(0, ANY)),
    F("host_filter", "string", (0, ANY), nullable=(0, ANY)),
    F("operation", "int8", (0, ANY), meaning="acl_operation"),
    F("permission_type", "int8", (0, ANY), meaning="acl_permission"),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("error_code", "int16", (0, ANY), meaning="error_code"),
    F("error_message", "string", (0, ANY), nullable=(0, ANY)),
    F("resources", "array", (0, ANY), struct="DescribeAclsResource", element="struct", fields=(
        F("resource_type", "int8", (0, ANY), meaning="resource_type"),
        F("resource_name", "string", (0, ANY)),
        F("pattern_type", "int8", (1, ANY), meaning="pattern_type"),
        F("acls", "array", (0, ANY), struct="AclDescription", element="struct", fields=(
            F("principal", "string", (0, ANY)),
            F("host", "string", (0, ANY)),
            F("operation", "int8", (0, ANY), meaning="acl_operation"),
            F("permission_type", "int8", (0, ANY), meaning="acl_permission"),
        )),
    )),
), kafka4_versions=(1, 3), listeners=("broker", "controller"))

APIS[30] = ApiDef(30, "CreateAcls", 0, 3, 2, request=(
    F("creations", "array", (0, ANY), struct="AclCreation", element="struct", fields=(
        F("resource_type", "int8", (0, ANY), meaning="resource_type"),
        F("resource_name", "string", (0, ANY)),
        F("resource_pattern_type", "int8", (1, ANY), meaning="pattern_type"),
        F("principal", "string", (0, ANY)),
        F("host", "string", (0, ANY)),
        F("operation", "int8", (0, ANY), meaning="acl_operation"),
        F("permission_type", "int8", (0, ANY), meaning="acl_permission"),
    )),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("results", "array", (0, ANY), struct="AclCreationResult", element="struct", fields=(
        F("error_code", "int16", (0, ANY), meaning="error_code"),
        F("error_message", "string", (0, ANY), nullable=(0, ANY)),
    )),
), kafka4_versions=(1, 3), listeners=("broker", "controller"))

APIS[31] = ApiDef(31, "DeleteAcls", 0, 3, 2, request=(
    F("filters", "array", (0, ANY), struct="DeleteAclsFilter", element="struct", fields=(
        F("resource_type_filter", "int8", (0, ANY), meaning="resource_type"),
        F("resource_name_filter", "string", (0, ANY), nullable=(0, ANY)),
        F("pattern_type_filter", "int8", (1, ANY), meaning="pattern_type"),
        F("principal_filter", "string", (0, ANY), nullable=(0, ANY)),
        F("host_filter", "string", (0, ANY), nullable=(0, ANY)),
        F("operation", "int8", (0, ANY), meaning="acl_operation"),
        F("permission_type", "int8", (0, ANY), meaning="acl_permission"),
    )),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("filter_results", "array", (0, ANY), struct="DeleteAclsFilterResult", element="struct", fields=(
        F("error_code", "int16", (0, ANY), meaning="error_code"),
        F("error_message", "string", (0, ANY), nullable=(0, ANY)),
        F("matching_acls", "array", (0, ANY), struct="DeleteAclsMatchingAcl", element="struct", fields=(
            F("error_code", "int16", (0, ANY), meaning="error_code"),
            F("error_message", "string", (0, ANY), nullable=(0, ANY)),
            F("resource_type", "int8", (0, ANY), meaning="resource_type"),
            F("resource_name", "string", (0, ANY)),
            F("pattern_type", "int8", (1, ANY), meaning="pattern_type"),
            F("principal", "string", (0, ANY)),
            F("host", "string", (0, ANY)),
            F("operation", "int8", (0, ANY), meaning="acl_operation"),
            F("permission_type", "int8", (0, ANY), meaning="acl_permission"),
        )),
    )),
), kafka4_versions=(1, 3), listeners=("broker", "controller"))

APIS[32] = ApiDef(32, "DescribeConfigs", 0, 4, 4, request=(
    F("resources", "array", (0, ANY), struct="DescribeConfigsResource", element="struct", fields=(
        F("resource_type", "int8", (0, ANY), meaning="resource_type"),
        F("resource_name", "string", (0, ANY)),
        F("configuration_keys", "array", (0, ANY), nullable=(0, ANY), element="string"),
    )),
    F("include_synonyms", "bool", (1, ANY)),
    F("include_documentation", "bool", (3, ANY)),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("results", "array", (0, ANY), struct="DescribeConfigsResult", element="struct", fields=(
        F("error_code", "int16", (0, ANY), meaning="error_code"),
        F("error_message", "string", (0, ANY), nullable=(0, ANY)),
        F("resource_type", "int8", (0, ANY), meaning="resource_type"),
        F("resource_name", "string", (0, ANY)),
        F("configs", "array", (0, ANY), struct="DescribeConfigsResourceResult", element="struct", fields=(
            F("name", "string", (0, ANY)),
            F("value", "string", (0, ANY), nullable=(0, ANY), meaning="config_value"),
            F("read_only", "bool", (0, ANY)),
            F("config_source", "int8", (1, ANY), meaning="config_source"),
            F("is_default", "bool", (0, 0)),
            F("is_sensitive", "bool", (0, ANY)),
            F("synonyms", "array", (1, ANY), struct="DescribeConfigsSynonym", element="struct", fields=(
                F("name", "string", (1, ANY)),
                F("value", "string", (1, ANY), nullable=(1, ANY), meaning="config_value"),
                F("source", "int8", (1, ANY), meaning="config_source"),
            )),
            F("config_type", "int8", (3, ANY)),
            F("documentation", "string", (3, ANY), nullable=(3, ANY)),
        )),
    )),
), kafka4_versions=(1, 4), listeners=("broker", "controller"))

APIS[33] = ApiDef(33, "AlterConfigs", 0, 2, 2, request=(
    F("resources", "array", (0, ANY), struct="AlterConfigsResource", element="struct", fields=(
        F("resource_type", "int8", (0, ANY), meaning="resource_type"),
        F("resource_name", "string", (0, ANY)),
        F("configs", "array", (0, ANY), struct="AlterableConfig", element="struct", fields=(
            F("name", "string", (0, ANY)),
            F("value", "string", (0, ANY), nullable=(0, ANY), meaning="config_value"),
        )),
    )),
    F("validate_only", "bool", (0, ANY)),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("responses", "array", (0, ANY), struct="AlterConfigsResourceResponse", element="struct", fields=(
        F("error_code", "int16", (0, ANY), meaning="error_code"),
        F("error_message", "string", (0, ANY), nullable=(0, ANY)),
        F("resource_type", "int8", (0, ANY), meaning="resource_type"),
        F("resource_name", "string", (0, ANY)),
    )),
), kafka4_versions=(0, 2), listeners=("broker", "controller"))

APIS[34] = ApiDef(34, "AlterReplicaLogDirs", 0, 2, 2, request=(
    F("dirs", "array", (0, ANY), struct="AlterReplicaLogDir", element="struct", fields=(
        F("path", "string", (0, ANY)),
        F("topics", "array", (0, ANY), struct="AlterReplicaLogDirTopic", element="struct", fields=(
            F("name", "string", (0, ANY)),
            F("partitions", "array", (0, ANY), element="int32"),
        )),
    )),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("results", "array", (0, ANY), struct="AlterReplicaLogDirTopicResult", element="struct", fields=(
        F("topic_name", "string", (0, ANY)),
        F("partitions", "array", (0, ANY), struct="AlterReplicaLogDirPartitionResult", element="struct", fields=(
            F("partition_index", "int32", (0, ANY)),
            F("error_code", "int16", (0, ANY), meaning="error_code"),
        )),
    )),
), kafka4_versions=(1, 2), listeners=("broker",))

APIS[35] = ApiDef(35, "DescribeLogDirs", 0, 5, 2, request=(
    F("topics", "array", (0, ANY), nullable=(0, ANY), struct="DescribableLogDirTopic", element="struct", fields=(
        F("topic", "string", (0, ANY)),
        F("partitions", "array", (0, ANY), element="int32"),
    )),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("error_code", "int16", (3, ANY), meaning="error_code"),
    F("results", "array", (0, ANY), struct="DescribeLogDirsResult", element="struct", fields=(
        F("error_code", "int16", (0, ANY), meaning="error_code"),
        F("log_dir", "string", (0, ANY)),
        F("topics", "array", (0, ANY), struct="DescribeLogDirsTopic", element="struct", fields=(
            F("name", "string", (0, ANY)),
            F("partitions", "array", (0, ANY), struct="DescribeLogDirsPartition", element="struct", fields=(
                F("partition_index", "int32", (0, ANY)),
                F("partition_size", "int64", (0, ANY)),
                F("offset_lag", "int64", (0, ANY)),
                F("is_future_key", "bool", (0, ANY)),
            )),
        )),
        F("total_bytes", "int64", (4, ANY)),
        F("usable_bytes", "int64", (4, ANY)),
        F("is_cordoned", "bool", (5, ANY)),
    )),
), kafka4_versions=(1, 5), listeners=("broker",))

APIS[36] = ApiDef(36, "SaslAuthenticate", 0, 2, 2, request=(
    F("auth_bytes", "bytes", (0, ANY), meaning="sasl_auth_bytes"),
), response=(
    F("error_code", "int16", (0, ANY), meaning="error_code"),
    F("error_message", "string", (0, ANY), nullable=(0, ANY)),
    F("auth_bytes", "bytes", (0, ANY), meaning="sasl_server_bytes"),
    F("session_lifetime_ms", "int64", (1, ANY)),
), kafka4_versions=(0, 2), listeners=("broker", "controller"))

APIS[37] = ApiDef(37, "CreatePartitions", 0, 3, 2, request=(
    F("topics", "array", (0, ANY), struct="CreatePartitionsTopic", element="struct", fields=(
        F("name", "string", (0, ANY)),
        F("count", "int32", (0, ANY)),
        F("assignments", "array", (0, ANY), nullable=(0, ANY), struct="CreatePartitionsAssignment", element="struct", fields=(
            F("broker_ids", "array", (0, ANY), element="int32"),
        )),
    )),
    F("timeout_ms", "int32", (0, ANY)),
    F("validate_only", "bool", (0, ANY)),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("results", "array", (0, ANY), struct="CreatePartitionsTopicResult", element="struct", fields=(
        F("name", "string", (0, ANY)),
        F("error_code", "int16", (0, ANY), meaning="error_code"),
        F("error_message", "string", (0, ANY), nullable=(0, ANY)),
    )),
), kafka4_versions=(0, 3), listeners=("broker", "controller"))

APIS[38] = ApiDef(38, "CreateDelegationToken", 0, 3, 2, request=(
    F("owner_principal_type", "string", (3, ANY), nullable=(3, ANY)),
    F("owner_principal_name", "string", (3, ANY), nullable=(3, ANY)),
    F("renewers", "array", (0, ANY), struct="CreatableRenewers", element="struct", fields=(
        F("principal_type", "string", (0, ANY)),
        F("principal_name", "string", (0, ANY)),
    )),
    F("max_lifetime_ms", "int64", (0, ANY)),
), response=(
    F("error_code", "int16", (0, ANY), meaning="error_code"),
    F("principal_type", "string", (0, ANY)),
    F("principal_name", "string", (0, ANY)),
    F("token_requester_principal_type", "string", (3, ANY)),
    F("token_requester_principal_name", "string", (3, ANY)),
    F("issue_timestamp_ms", "int64", (0, ANY), meaning="timestamp_ms"),
    F("expiry_timestamp_ms", "int64", (0, ANY), meaning="timestamp_ms"),
    F("max_timestamp_ms", "int64", (0, ANY), meaning="timestamp_ms"),
    F("token_id", "string", (0, ANY)),
    F("hmac", "bytes", (0, ANY), meaning="secret"),
    F("throttle_time_ms", "int32", (0, ANY)),
), kafka4_versions=(1, 3), listeners=("broker", "controller"))

APIS[39] = ApiDef(39, "RenewDelegationToken", 0, 2, 2, request=(
    F("hmac", "bytes", (0, ANY), meaning="secret"),
    F("renew_period_ms", "int64", (0, ANY)),
), response=(
    F("error_code", "int16", (0, ANY), meaning="error_code"),
    F("expiry_timestamp_ms", "int64", (0, ANY), meaning="timestamp_ms"),
    F("throttle_time_ms", "int32", (0, ANY)),
), kafka4_versions=(1, 2), listeners=("broker", "controller"))

APIS[40] = ApiDef(40, "ExpireDelegationToken", 0, 2, 2, request=(
    F("hmac", "bytes", (0, ANY), meaning="secret"),
    F("expiry_time_period_ms", "int64", (0, ANY)),
), response=(
    F("error_code", "int16", (0, ANY), meaning="error_code"),
    F("expiry_timestamp_ms", "int64", (0, ANY), meaning="timestamp_ms"),
    F("throttle_time_ms", "int32", (0, ANY)),
), kafka4_versions=(1, 2), listeners=("broker", "controller"))

APIS[41] = ApiDef(41, "DescribeDelegationToken", 0, 3, 2, request=(
    F("owners", "array", (0, ANY), nullable=(0, ANY), struct="DescribeDelegationTokenOwner", element="struct", fields=(
        F("principal_type", "string", (0, ANY)),
        F("principal_name", "string", (0, ANY)),
    )),
), response=(
    F("error_code", "int16", (0, ANY), meaning="error_code"),
    F("tokens", "array", (0, ANY), struct="DescribedDelegationToken", element="struct", fields=(
        F("principal_type", "string", (0, ANY)),
        F("principal_name", "string", (0, ANY)),
        F("token_requester_principal_type", "string", (3, ANY)),
        F("token_requester_principal_name", "string", (3, ANY)),
        F("issue_timestamp", "int64", (0, ANY), meaning="timestamp_ms"),
        F("expiry_timestamp", "int64", (0, ANY), meaning="timestamp_ms"),
        F("max_timestamp", "int64", (0, ANY), meaning="timestamp_ms"),
        F("token_id", "string", (0, ANY)),
        F("hmac", "bytes", (0, ANY), meaning="secret"),
        F("renewers", "array", (0, ANY), struct="DescribedDelegationTokenRenewer", element="struct", fields=(
            F("principal_type", "string", (0, ANY)),
            F("principal_name", "string", (0, ANY)),
        )),
    )),
    F("throttle_time_ms", "int32", (0, ANY)),
), kafka4_versions=(1, 3), listeners=("broker", "controller"))

APIS[42] = ApiDef(42, "DeleteGroups", 0, 3, 2, request=(
    F("groups_names", "array", (0, ANY), element="string"),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("results", "array", (0, ANY), struct="DeletableGroupResult", element="struct", fields=(
        F("group_id", "string", (0, ANY)),
        F("error_code", "int16", (0, ANY), meaning="error_code"),
        F("error_message", "string", (3, ANY), nullable=(3, ANY)),
    )),
), kafka4_versions=(0, 3), listeners=("broker",))

APIS[43] = ApiDef(43, "ElectLeaders", 0, 2, 2, request=(
    F("election_type", "int8", (1, ANY)),
    F("topic_partitions", "array", (0, ANY), nullable=(0, ANY), struct="TopicPartitions", element="struct", fields=(
        F("topic", "string", (0, ANY)),
        F("partitions", "array", (0, ANY), element="int32"),
    )),
    F("timeout_ms", "int32", (0, ANY)),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("error_code", "int16", (1, ANY), meaning="error_code"),
    F("replica_election_results", "array", (0, ANY), struct="ReplicaElectionResult", element="struct", fields=(
        F("topic", "string", (0, ANY)),
        F("partition_result", "array", (0, ANY), struct="PartitionResult", element="struct", fields=(
            F("partition_id", "int32", (0, ANY)),
            F("error_code", "int16", (0, ANY), meaning="error_code"),
            F("error_message", "string", (0, ANY), nullable=(0, ANY)),
        )),
    )),
), kafka4_versions=(0, 2), listeners=("broker", "controller"))

APIS[44] = ApiDef(44, "IncrementalAlterConfigs", 0, 1, 1, request=(
    F("resources", "array", (0, ANY), struct="AlterConfigsResource", element="struct", fields=(
        F("resource_type", "int8", (0, ANY), meaning="resource_type"),
        F("resource_name", "string", (0, ANY)),
        F("configs", "array", (0, ANY), struct="AlterableConfig", element="struct", fields=(
            F("name", "string", (0, ANY)),
            F("config_operation", "int8", (0, ANY)),
            F("value", "string", (0, ANY), nullable=(0, ANY), meaning="config_value"),
        )),
    )),
    F("validate_only", "bool", (0, ANY)),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("responses", "array", (0, ANY), struct="AlterConfigsResourceResponse", element="struct", fields=(
        F("error_code", "int16", (0, ANY), meaning="error_code"),
        F("error_message", "string", (0, ANY), nullable=(0, ANY)),
        F("resource_type", "int8", (0, ANY), meaning="resource_type"),
        F("resource_name", "string", (0, ANY)),
    )),
), kafka4_versions=(0, 1), listeners=("broker", "controller"))

APIS[45] = ApiDef(45, "AlterPartitionReassignments", 0, 1, 0, request=(
    F("timeout_ms", "int32", (0, ANY)),
    F("allow_replication_factor_change", "bool", (1, ANY)),
    F("topics", "array", (0, ANY), struct="ReassignableTopic", element="struct", fields=(
        F("name", "string", (0, ANY)),
        F("partitions", "array", (0, ANY), struct="ReassignablePartition", element="struct", fields=(
            F("partition_index", "int32", (0, ANY)),
            F("replicas", "array", (0, ANY), nullable=(0, ANY), element="int32"),
        )),
    )),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("allow_replication_factor_change", "bool", (1, ANY)),
    F("error_code", "int16", (0, ANY), meaning="error_code"),
    F("error_message", "string", (0, ANY), nullable=(0, ANY)),
    F("responses", "array", (0, ANY), struct="ReassignableTopicResponse", element="struct", fields=(
        F("name", "string", (0, ANY)),
        F("partitions", "array", (0, ANY), struct="ReassignablePartitionResponse", element="struct", fields=(
            F("partition_index", "int32", (0, ANY)),
            F("error_code", "int16", (0, ANY), meaning="error_code"),
            F("error_message", "string", (0, ANY), nullable=(0, ANY)),
        )),
    )),
), kafka4_versions=(0, 1), listeners=("broker", "controller"))

APIS[46] = ApiDef(46, "ListPartitionReassignments", 0, 0, 0, request=(
    F("timeout_ms", "int32", (0, ANY)),
    F("topics", "array", (0, ANY), nullable=(0, ANY), struct="ListPartitionReassignmentsTopics", element="struct", fields=(
        F("name", "string", (0, ANY)),
        F("partition_indexes", "array", (0, ANY), element="int32"),
    )),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("error_code", "int16", (0, ANY), meaning="error_code"),
    F("error_message", "string", (0, ANY), nullable=(0, ANY)),
    F("topics", "array", (0, ANY), struct="OngoingTopicReassignment", element="struct", fields=(
        F("name", "string", (0, ANY)),
        F("partitions", "array", (0, ANY), struct="OngoingPartitionReassignment", element="struct", fields=(
            F("partition_index", "int32", (0, ANY)),
            F("replicas", "array", (0, ANY), element="int32"),
            F("adding_replicas", "array", (0, ANY), element="int32"),
            F("removing_replicas", "array", (0, ANY), element="int32"),
        )),
    )),
), kafka4_versions=(0, 0), listeners=("broker", "controller"))

APIS[47] = ApiDef(47, "OffsetDelete", 0, 0, None, request=(
    F("group_id", "string", (0, ANY)),
    F("topics", "array", (0, ANY), struct="OffsetDeleteRequestTopic", element="struct", fields=(
        F("name", "string", (0, ANY)),
        F("partitions", "array", (0, ANY), struct="OffsetDeleteRequestPartition", element="struct", fields=(
            F("partition_index", "int32", (0, ANY)),
        )),
    )),
), response=(
    F("error_code", "int16", (0, ANY), meaning="error_code"),
    F("throttle_time_ms", "int32", (0, ANY)),
    F("topics", "array", (0, ANY), struct="OffsetDeleteResponseTopic", element="struct", fields=(
        F("name", "string", (0, ANY)),
        F("partitions", "array", (0, ANY), struct="OffsetDeleteResponsePartition", element="struct", fields=(
            F("partition_index", "int32", (0, ANY)),
            F("error_code", "int16", (0, ANY), meaning="error_code"),
        )),
    )),
), kafka4_versions=(0, 0), listeners=("broker",))

APIS[48] = ApiDef(48, "DescribeClientQuotas", 0, 1, 1, request=(
    F("components", "array", (0, ANY), struct="ComponentData", element="struct", fields=(
        F("entity_type", "string", (0, ANY)),
        F("match_type", "int8", (0, ANY)),
        F("match", "string", (0, ANY), nullable=(0, ANY)),
    )),
    F("strict", "bool", (0, ANY)),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("error_code", "int16", (0, ANY), meaning="error_code"),
    F("error_message", "string", (0, ANY), nullable=(0, ANY)),
    F("entries", "array", (0, ANY), nullable=(0, ANY), struct="EntryData", element="struct", fields=(
        F("entity", "array", (0, ANY), struct="EntityData", element="struct", fields=(
            F("entity_type", "string", (0, ANY)),
            F("entity_name", "string", (0, ANY), nullable=(0, ANY)),
        )),
        F("values", "array", (0, ANY), struct="ValueData", element="struct", fields=(
            F("key", "string", (0, ANY)),
            F("value", "float64", (0, ANY)),
        )),
    )),
), kafka4_versions=(0, 1), listeners=("broker",))

APIS[49] = ApiDef(49, "AlterClientQuotas", 0, 1, 1, request=(
    F("entries", "array", (0, ANY), struct="EntryData", element="struct", fields=(
        F("entity", "array", (0, ANY), struct="EntityData", element="struct", fields=(
            F("entity_type", "string", (0, ANY)),
            F("entity_name", "string", (0, ANY), nullable=(0, ANY)),
        )),
        F("ops", "array", (0, ANY), struct="OpData", element="struct", fields=(
            F("key", "string", (0, ANY)),
            F("value", "float64", (0, ANY)),
            F("remove", "bool", (0, ANY)),
        )),
    )),
    F("validate_only", "bool", (0, ANY)),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("entries", "array", (0, ANY), struct="EntryData", element="struct", fields=(
        F("error_code", "int16", (0, ANY), meaning="error_code"),
        F("error_message", "string", (0, ANY), nullable=(0, ANY)),
        F("entity", "array", (0, ANY), struct="EntityData", element="struct", fields=(
            F("entity_type", "string", (0, ANY)),
            F("entity_name", "string", (0, ANY), nullable=(0, ANY)),
        )),
    )),
), kafka4_versions=(0, 1), listeners=("broker", "controller"))

APIS[50] = ApiDef(50, "DescribeUserScramCredentials", 0, 0, 0, request=(
    F("users", "array", (0, ANY), nullable=(0, ANY), struct="UserName", element="struct", fields=(
        F("name", "string", (0, ANY)),
    )),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("error_code", "int16", (0, ANY), meaning="error_code"),
    F("error_message", "string", (0, ANY), nullable=(0, ANY)),
    F("results", "array", (0, ANY), struct="DescribeUserScramCredentialsResult", element="struct", fields=(
        F("user", "string", (0, ANY)),
        F("error_code", "int16", (0, ANY), meaning="error_code"),
        F("error_message", "string", (0, ANY), nullable=(0, ANY)),
        F("credential_infos", "array", (0, ANY), struct="CredentialInfo", element="struct", fields=(
            F("mechanism", "int8", (0, ANY)),
            F("iterations", "int32", (0, ANY)),
        )),
    )),
), kafka4_versions=(0, 0), listeners=("broker", "controller"))

APIS[51] = ApiDef(51, "AlterUserScramCredentials", 0, 0, 0, request=(
    F("deletions", "array", (0, ANY), struct="ScramCredentialDeletion", element="struct", fields=(
        F("name", "string", (0, ANY)),
        F("mechanism", "int8", (0, ANY)),
    )),
    F("upsertions", "array", (0, ANY), struct="ScramCredentialUpsertion", element="struct", fields=(
        F("name", "string", (0, ANY)),
        F("mechanism", "int8", (0, ANY)),
        F("iterations", "int32", (0, ANY)),
        F("salt", "bytes", (0, ANY), meaning="secret"),
        F("salted_password", "bytes", (0, ANY), meaning="secret"),
    )),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("results", "array", (0, ANY), struct="AlterUserScramCredentialsResult", element="struct", fields=(
        F("user", "string", (0, ANY)),
        F("error_code", "int16", (0, ANY), meaning="error_code"),
        F("error_message", "string", (0, ANY), nullable=(0, ANY)),
    )),
), kafka4_versions=(0, 0), listeners=("broker", "controller"))

APIS[52] = ApiDef(52, "Vote", 0, 2, 0, request=(
    F("cluster_id", "string", (0, ANY), nullable=(0, ANY)),
    F("voter_id", "int32", (1, ANY)),
    F("topics", "array", (0, ANY), struct="TopicData", element="struct", fields=(
        F("topic_name", "string", (0, ANY)),
        F("partitions", "array", (0, ANY), struct="PartitionData", element="struct", fields=(
            F("partition_index", "int32", (0, ANY)),
            F("replica_epoch", "int32", (0, ANY)),
            F("replica_id", "int32", (0, ANY)),
            F("replica_directory_id", "uuid", (1, ANY)),
            F("voter_directory_id", "uuid", (1, ANY)),
            F("last_offset_epoch", "int32", (0, ANY)),
            F("last_offset", "int64", (0, ANY)),
            F("pre_vote", "bool", (2, ANY)),
        )),
    )),
), response=(
    F("error_code", "int16", (0, ANY), meaning="error_code"),
    F("topics", "array", (0, ANY), struct="TopicData", element="struct", fields=(
        F("topic_name", "string", (0, ANY)),
        F("partitions", "array", (0, ANY), struct="PartitionData", element="struct", fields=(
            F("partition_index", "int32", (0, ANY)),
            F("error_code", "int16", (0, ANY), meaning="error_code"),
            F("leader_id", "int32", (0, ANY)),
            F("leader_epoch", "int32", (0, ANY)),
            F("vote_granted", "bool", (0, ANY)),
        )),
    )),
    F("node_endpoints", "array", (1, ANY), tag=0, tagged=(1, ANY), struct="NodeEndpoint", element="struct", fields=(
        F("node_id", "int32", (1, ANY)),
        F("host", "string", (1, ANY)),
        F("port", "uint16", (1, ANY)),
    )),
), kafka4_versions=(0, 2), listeners=("controller",))

APIS[53] = ApiDef(53, "BeginQuorumEpoch", 0, 1, 1, request=(
    F("cluster_id", "string", (0, ANY), nullable=(0, ANY)),
    F("voter_id", "int32", (1, ANY)),
    F("topics", "array", (0, ANY), struct="TopicData", element="struct", fields=(
        F("topic_name", "string", (0, ANY)),
        F("partitions", "array", (0, ANY), struct="PartitionData", element="struct", fields=(
            F("partition_index", "int32", (0, ANY)),
            F("voter_directory_id", "uuid", (1, ANY)),
            F("leader_id", "int32", (0, ANY)),
            F("leader_epoch", "int32", (0, ANY)),
        )),
    )),
    F("leader_endpoints", "array", (1, ANY), struct="LeaderEndpoint", element="struct", fields=(
        F("name", "string", (1, ANY)),
        F("host", "string", (1, ANY)),
        F("port", "uint16", (1, ANY)),
    )),
), response=(
    F("error_code", "int16", (0, ANY), meaning="error_code"),
    F("topics", "array", (0, ANY), struct="TopicData", element="struct", fields=(
        F("topic_name", "string", (0, ANY)),
        F("partitions", "array", (0, ANY), struct="PartitionData", element="struct", fields=(
            F("partition_index", "int32", (0, ANY)),
            F("error_code", "int16", (0, ANY), meaning="error_code"),
            F("leader_id", "int32", (0, ANY)),
            F("leader_epoch", "int32", (0, ANY)),
        )),
    )),
    F("node_endpoints", "array", (1, ANY), tag=0, tagged=(1, ANY), struct="NodeEndpoint", element="struct", fields=(
        F("node_id", "int32", (1, ANY)),
        F("host", "string", (1, ANY)),
        F("port", "uint16", (1, ANY)),
    )),
), kafka4_versions=(0, 1), listeners=("controller",))

APIS[54] = ApiDef(54, "EndQuorumEpoch", 0, 1, 1, request=(
    F("cluster_id", "string", (0, ANY), nullable=(0, ANY)),
    F("topics", "array", (0, ANY), struct="TopicData", element="struct", fields=(
        F("topic_name", "string", (0, ANY)),
        F("partitions", "array", (0, ANY), struct="PartitionData", element="struct", fields=(
            F("partition_index", "int32", (0, ANY)),
            F("leader_id", "int32", (0, ANY)),
            F("leader_epoch", "int32", (0, ANY)),
            F("preferred_candidates", "array", (1, ANY), struct="ReplicaInfo", element="struct", fields=(
                F("candidate_id", "int32", (1, ANY)),
                F("candidate_directory_id", "uuid", (1, ANY)),
            )),
            F("preferred_successors", "array", (0, 0), element="int32"),
        )),
    )),
    F("leader_endpoints", "array", (1, ANY), struct="LeaderEndpoint", element="struct", fields=(
        F("name", "string", (1, ANY)),
        F("host", "string", (1, ANY)),
        F("port", "uint16", (1, ANY)),
    )),
), response=(
    F("error_code", "int16", (0, ANY), meaning="error_code"),
    F("topics", "array", (0, ANY), struct="TopicData", element="struct", fields=(
        F("topic_name", "string", (0, ANY)),
        F("partitions", "array", (0, ANY), struct="PartitionData", element="struct", fields=(
            F("partition_index", "int32", (0, ANY)),
            F("error_code", "int16", (0, ANY), meaning="error_code"),
            F("leader_id", "int32", (0, ANY)),
            F("leader_epoch", "int32", (0, ANY)),
        )),
    )),
    F("node_endpoints", "array", (1, ANY), tag=0, tagged=(1, ANY), struct="NodeEndpoint", element="struct", fields=(
        F("node_id", "int32", (1, ANY)),
        F("host", "string", (1, ANY)),
        F("port", "uint16", (1, ANY)),
    )),
), kafka4_versions=(0, 1), listeners=("controller",))

APIS[55] = ApiDef(55, "DescribeQuorum", 0, 2, 0, request=(
    F("topics", "array", (0, ANY), struct="TopicData", element="struct", fields=(
        F("topic_name", "string", (0, ANY)),
        F("partitions", "array", (0, ANY), struct="PartitionData", element="struct", fields=(
            F("partition_index", "int32", (0, ANY)),
        )),
    )),
), response=(
    F("error_code", "int16", (0, ANY), meaning="error_code"),
    F("error_message", "string", (2, ANY), nullable=(2, ANY)),
    F("topics", "array", (0, ANY), struct="TopicData", element="struct", fields=(
        F("topic_name", "string", (0, ANY)),
        F("partitions", "array", (0, ANY), struct="PartitionData", element="struct", fields=(
            F("partition_index", "int32", (0, ANY)),
            F("error_code", "int16", (0, ANY), meaning="error_code"),
            F("error_message", "string", (2, ANY), nullable=(2, ANY)),
            F("leader_id", "int32", (0, ANY)),
            F("leader_epoch", "int32", (0, ANY)),
            F("high_watermark", "int64", (0, ANY)),
            F("current_voters", "array", (0, ANY), struct="ReplicaState", element="struct", fields=(
                F("replica_id", "int32", (0, ANY)),
                F("replica_directory_id", "uuid", (2, ANY)),
                F("log_end_offset", "int64", (0, ANY)),
                F("last_fetch_timestamp", "int64", (1, ANY), meaning="timestamp_ms"),
                F("last_caught_up_timestamp", "int64", (1, ANY), meaning="timestamp_ms"),
            )),
            F("observers", "array", (0, ANY), struct="ReplicaState", element="struct", fields=(
                F("replica_id", "int32", (0, ANY)),
                F("replica_directory_id", "uuid", (2, ANY)),
                F("log_end_offset", "int64", (0, ANY)),
                F("last_fetch_timestamp", "int64", (1, ANY), meaning="timestamp_ms"),
                F("last_caught_up_timestamp", "int64", (1, ANY), meaning="timestamp_ms"),
            )),
        )),
    )),
    F("nodes", "array", (2, ANY), struct="Node", element="struct", fields=(
        F("node_id", "int32", (2, ANY)),
        F("listeners", "array", (2, ANY), struct="Listener", element="struct", fields=(
            F("name", "string", (2, ANY)),
            F("host", "string", (2, ANY)),
            F("port", "uint16", (2, ANY)),
        )),
    )),
), kafka4_versions=(0, 2), listeners=("broker", "controller"))

APIS[56] = ApiDef(56, "AlterPartition", 0, 3, 0, request=(
    F("broker_id", "int32", (0, ANY)),
    F("broker_epoch", "int64", (0, ANY)),
    F("topics", "array", (0, ANY), struct="TopicData", element="struct", fields=(
        F("topic_id", "uuid", (2, ANY), meaning="topic_id"),
        F("topic_name", "string", (0, 1)),
        F("partitions", "array", (0, ANY), struct="PartitionData", element="struct", fields=(
            F("partition_index", "int32", (0, ANY)),
            F("leader_epoch", "int32", (0, ANY)),
            F("new_isr_with_epochs", "array", (3, ANY), struct="BrokerState", element="struct", fields=(
                F("broker_id", "int32", (3, ANY)),
                F("broker_epoch", "int64", (3, ANY)),
            )),
            F("new_isr", "array", (0, 2), element="int32"),
            F("leader_recovery_state", "int8", (1, ANY)),
            F("partition_epoch", "int32", (0, ANY)),
        )),
    )),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("error_code", "int16", (0, ANY), meaning="error_code"),
    F("topics", "array", (0, ANY), struct="TopicData", element="struct", fields=(
        F("topic_id", "uuid", (2, ANY), meaning="topic_id"),
        F("topic_name", "string", (0, 1)),
        F("partitions", "array", (0, ANY), struct="PartitionData", element="struct", fields=(
            F("partition_index", "int32", (0, ANY)),
            F("error_code", "int16", (0, ANY), meaning="error_code"),
            F("leader_id", "int32", (0, ANY)),
            F("leader_epoch", "int32", (0, ANY)),
            F("isr", "array", (0, ANY), element="int32"),
            F("leader_recovery_state", "int8", (1, ANY)),
            F("partition_epoch", "int32", (0, ANY)),
        )),
    )),
), kafka4_versions=(2, 3), listeners=("controller",))

APIS[57] = ApiDef(57, "UpdateFeatures", 0, 2, 0, request=(
    F("timeout_ms", "int32", (0, ANY)),
    F("feature_updates", "array", (0, ANY), struct="FeatureUpdateKey", element="struct", fields=(
        F("feature", "string", (0, ANY)),
        F("max_version_level", "int16", (0, ANY)),
        F("upgrade_type", "int8", (1, ANY)),
        F("allow_downgrade", "bool", (0, 0)),
    )),
    F("validate_only", "bool", (1, ANY)),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("error_code", "int16", (0, ANY), meaning="error_code"),
    F("error_message", "string", (0, ANY), nullable=(0, ANY)),
    F("results", "array", (0, 1), struct="UpdatableFeatureResult", element="struct", fields=(
        F("feature", "string", (0, 1)),
        F("error_code", "int16", (0, 1), meaning="error_code"),
        F("error_message", "string", (0, 1), nullable=(0, 1)),
    )),
), kafka4_versions=(0, 2), listeners=("broker", "controller"))

APIS[58] = ApiDef(58, "Envelope", 0, 0, 0, request=(
    F("request_data", "bytes", (0, ANY)),
    F("request_principal", "bytes", (0, ANY), nullable=(0, ANY)),
    F("client_host_address", "bytes", (0, ANY)),
), response=(
    F("response_data", "bytes", (0, ANY), nullable=(0, ANY)),
    F("error_code", "int16", (0, ANY), meaning="error_code"),
), kafka4_versions=(0, 0), listeners=("controller",))

APIS[59] = ApiDef(59, "FetchSnapshot", 0, 1, 0, request=(
    F("cluster_id", "string", (0, ANY), nullable=(0, ANY), tag=0, tagged=(0, ANY)),
    F("replica_id", "int32", (0, ANY)),
    F("max_bytes", "int32", (0, ANY)),
    F("topics", "array", (0, ANY), struct="TopicSnapshot", element="struct", fields=(
        F("name", "string", (0, ANY)),
        F("partitions", "array", (0, ANY), struct="PartitionSnapshot", element="struct", fields=(
            F("partition", "int32", (0, ANY)),
            F("current_leader_epoch", "int32", (0, ANY)),
            F("snapshot_id", "struct", (0, ANY), struct="SnapshotId", fields=(
                F("end_offset", "int64", (0, ANY)),
                F("epoch", "int32", (0, ANY)),
            )),
            F("position", "int64", (0, ANY)),
            F("replica_directory_id", "uuid", (1, ANY), tag=0, tagged=(1, ANY)),
        )),
    )),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("error_code", "int16", (0, ANY), meaning="error_code"),
    F("topics", "array", (0, ANY), struct="TopicSnapshot", element="struct", fields=(
        F("name", "string", (0, ANY)),
        F("partitions", "array", (0, ANY), struct="PartitionSnapshot", element="struct", fields=(
            F("index", "int32", (0, ANY)),
            F("error_code", "int16", (0, ANY), meaning="error_code"),
            F("snapshot_id", "struct", (0, ANY), struct="SnapshotId", fields=(
                F("end_offset", "int64", (0, ANY)),
                F("epoch", "int32", (0, ANY)),
            )),
            F("current_leader", "struct", (0, ANY), tag=0, tagged=(0, ANY), struct="LeaderIdAndEpoch", fields=(
                F("leader_id", "int32", (0, ANY)),
                F("leader_epoch", "int32", (0, ANY)),
            )),
            F("size", "int64", (0, ANY)),
            F("position", "int64", (0, ANY)),
            F("unaligned_records", "records", (0, ANY)),
        )),
    )),
    F("node_endpoints", "array", (1, ANY), tag=0, tagged=(1, ANY), struct="NodeEndpoint", element="struct", fields=(
        F("node_id", "int32", (1, ANY)),
        F("host", "string", (1, ANY)),
        F("port", "uint16", (1, ANY)),
    )),
), kafka4_versions=(0, 1), listeners=("controller",))

APIS[60] = ApiDef(60, "DescribeCluster", 0, 2, 0, request=(
    F("include_cluster_authorized_operations", "bool", (0, ANY)),
    F("endpoint_type", "int8", (1, ANY)),
    F("include_fenced_brokers", "bool", (2, ANY)),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("error_code", "int16", (0, ANY), meaning="error_code"),
    F("error_message", "string", (0, ANY), nullable=(0, ANY)),
    F("endpoint_type", "int8", (1, ANY)),
    F("cluster_id", "string", (0, ANY)),
    F("controller_id", "int32", (0, ANY)),
    F("brokers", "array", (0, ANY), struct="DescribeClusterBroker", element="struct", fields=(
        F("broker_id", "int32", (0, ANY)),
        F("host", "string", (0, ANY)),
        F("port", "int32", (0, ANY)),
        F("rack", "string", (0, ANY), nullable=(0, ANY)),
        F("is_fenced", "bool", (2, ANY)),
    )),
    F("cluster_authorized_operations", "int32", (0, ANY)),
), kafka4_versions=(0, 2), listeners=("broker", "controller"))

APIS[61] = ApiDef(61, "DescribeProducers", 0, 0, 0, request=(
    F("topics", "array", (0, ANY), struct="TopicRequest", element="struct", fields=(
        F("name", "string", (0, ANY)),
        F("partition_indexes", "array", (0, ANY), element="int32"),
    )),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("topics", "array", (0, ANY), struct="TopicResponse", element="struct", fields=(
        F("name", "string", (0, ANY)),
        F("partitions", "array", (0, ANY), struct="PartitionResponse", element="struct", fields=(
            F("partition_index", "int32", (0, ANY)),
            F("error_code", "int16", (0, ANY), meaning="error_code"),
            F("error_message", "string", (0, ANY), nullable=(0, ANY)),
            F("active_producers", "array", (0, ANY), struct="ProducerState", element="struct", fields=(
                F("producer_id", "int64", (0, ANY)),
                F("producer_epoch", "int32", (0, ANY)),
                F("last_sequence", "int32", (0, ANY)),
                F("last_timestamp", "int64", (0, ANY), meaning="timestamp_ms"),
                F("coordinator_epoch", "int32", (0, ANY)),
                F("current_txn_start_offset", "int64", (0, ANY)),
            )),
        )),
    )),
), kafka4_versions=(0, 0), listeners=("broker",))

APIS[62] = ApiDef(62, "BrokerRegistration", 0, 4, 0, request=(
    F("broker_id", "int32", (0, ANY)),
    F("cluster_id", "string", (0, ANY)),
    F("incarnation_id", "uuid", (0, ANY)),
    F("listeners", "array", (0, ANY), struct="Listener", element="struct", fields=(
        F("name", "string", (0, ANY)),
        F("host", "string", (0, ANY)),
        F("port", "uint16", (0, ANY)),
        F("security_protocol", "int16", (0, ANY)),
    )),
    F("features", "array", (0, ANY), struct="Feature", element="struct", fields=(
        F("name", "string", (0, ANY)),
        F("min_supported_version", "int16", (0, ANY)),
        F("max_supported_version", "int16", (0, ANY)),
    )),
    F("rack", "string", (0, ANY), nullable=(0, ANY)),
    F("is_migrating_zk_broker", "bool", (1, ANY)),
    F("log_dirs", "array", (2, ANY), element="uuid"),
    F("previous_broker_epoch", "int64", (3, ANY)),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("error_code", "int16", (0, ANY), meaning="error_code"),
    F("broker_epoch", "int64", (0, ANY)),
), kafka4_versions=(0, 4), listeners=("controller",))

APIS[63] = ApiDef(63, "BrokerHeartbeat", 0, 2, 0, request=(
    F("broker_id", "int32", (0, ANY)),
    F("broker_epoch", "int64", (0, ANY)),
    F("current_metadata_offset", "int64", (0, ANY)),
    F("want_fence", "bool", (0, ANY)),
    F("want_shut_down", "bool", (0, ANY)),
    F("offline_log_dirs", "array", (1, ANY), tag=0, tagged=(1, ANY), element="uuid"),
    F("cordoned_log_dirs", "array", (2, ANY), nullable=(2, ANY), tag=1, tagged=(2, ANY), element="uuid"),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("error_code", "int16", (0, ANY), meaning="error_code"),
    F("is_caught_up", "bool", (0, ANY)),
    F("is_fenced", "bool", (0, ANY)),
    F("should_shut_down", "bool", (0, ANY)),
), kafka4_versions=(0, 2), listeners=("controller",))

APIS[64] = ApiDef(64, "UnregisterBroker", 0, 0, 0, request=(
    F("broker_id", "int32", (0, ANY)),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("error_code", "int16", (0, ANY), meaning="error_code"),
    F("error_message", "string", (0, ANY), nullable=(0, ANY)),
), kafka4_versions=(0, 0), listeners=("broker", "controller"))

APIS[65] = ApiDef(65, "DescribeTransactions", 0, 0, 0, request=(
    F("transactional_ids", "array", (0, ANY), element="string"),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("transaction_states", "array", (0, ANY), struct="TransactionState", element="struct", fields=(
        F("error_code", "int16", (0, ANY), meaning="error_code"),
        F("transactional_id", "string", (0, ANY)),
        F("transaction_state", "string", (0, ANY)),
        F("transaction_timeout_ms", "int32", (0, ANY)),
        F("transaction_start_time_ms", "int64", (0, ANY), meaning="timestamp_ms"),
        F("producer_id", "int64", (0, ANY)),
        F("producer_epoch", "int16", (0, ANY)),
        F("topics", "array", (0, ANY), struct="TopicData", element="struct", fields=(
            F("topic", "string", (0, ANY)),
            F("partitions", "array", (0, ANY), element="int32"),
        )),
    )),
), kafka4_versions=(0, 0), listeners=("broker",))

APIS[66] = ApiDef(66, "ListTransactions", 0, 2, 0, request=(
    F("state_filters", "array", (0, ANY), element="string"),
    F("producer_id_filters", "array", (0, ANY), element="int64"),
    F("duration_filter", "int64", (1, ANY)),
    F("transactional_id_pattern", "string", (2, ANY), nullable=(2, ANY)),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("error_code", "int16", (0, ANY), meaning="error_code"),
    F("unknown_state_filters", "array", (0, ANY), element="string"),
    F("transaction_states", "array", (0, ANY), struct="TransactionState", element="struct", fields=(
        F("transactional_id", "string", (0, ANY)),
        F("producer_id", "int64", (0, ANY)),
        F("transaction_state", "string", (0, ANY)),
    )),
), kafka4_versions=(0, 2), listeners=("broker",))

APIS[67] = ApiDef(67, "AllocateProducerIds", 0, 0, 0, request=(
    F("broker_id", "int32", (0, ANY)),
    F("broker_epoch", "int64", (0, ANY)),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("error_code", "int16", (0, ANY), meaning="error_code"),
    F("producer_id_start", "int64", (0, ANY)),
    F("producer_id_len", "int32", (0, ANY)),
), kafka4_versions=(0, 0), listeners=("controller",))

APIS[68] = ApiDef(68, "ConsumerGroupHeartbeat", 0, 1, 0, request=(
    F("group_id", "string", (0, ANY)),
    F("member_id", "string", (0, ANY)),
    F("member_epoch", "int32", (0, ANY)),
    F("instance_id", "string", (0, ANY), nullable=(0, ANY)),
    F("rack_id", "string", (0, ANY), nullable=(0, ANY)),
    F("rebalance_timeout_ms", "int32", (0, ANY)),
    F("subscribed_topic_names", "array", (0, ANY), nullable=(0, ANY), element="string"),
    F("subscribed_topic_regex", "string", (1, ANY), nullable=(1, ANY)),
    F("server_assignor", "string", (0, ANY), nullable=(0, ANY)),
    F("topic_partitions", "array", (0, ANY), nullable=(0, ANY), struct="TopicPartitions", element="struct", fields=(
        F("topic_id", "uuid", (0, ANY), meaning="topic_id"),
        F("partitions", "array", (0, ANY), element="int32"),
    )),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("error_code", "int16", (0, ANY), meaning="error_code"),
    F("error_message", "string", (0, ANY), nullable=(0, ANY)),
    F("member_id", "string", (0, ANY), nullable=(0, ANY)),
    F("member_epoch", "int32", (0, ANY)),
    F("heartbeat_interval_ms", "int32", (0, ANY)),
    F("assignment", "struct", (0, ANY), nullable=(0, ANY), struct="Assignment", fields=(
        F("topic_partitions", "array", (0, ANY), struct="TopicPartitions", element="struct", fields=(
            F("topic_id", "uuid", (0, ANY), meaning="topic_id"),
            F("partitions", "array", (0, ANY), element="int32"),
        )),
    )),
), kafka4_versions=(0, 1), listeners=("broker",))

APIS[69] = ApiDef(69, "ConsumerGroupDescribe", 0, 1, 0, request=(
    F("group_ids", "array", (0, ANY), element="string"),
    F("include_authorized_operations", "bool", (0, ANY)),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("groups", "array", (0, ANY), struct="DescribedGroup", element="struct", fields=(
        F("error_code", "int16", (0, ANY), meaning="error_code"),
        F("error_message", "string", (0, ANY), nullable=(0, ANY)),
        F("group_id", "string", (0, ANY)),
        F("group_state", "string", (0, ANY)),
        F("group_epoch", "int32", (0, ANY)),
        F("assignment_epoch", "int32", (0, ANY)),
        F("assignor_name", "string", (0, ANY)),
        F("members", "array", (0, ANY), struct="Member", element="struct", fields=(
            F("member_id", "string", (0, ANY)),
            F("instance_id", "string", (0, ANY), nullable=(0, ANY)),
            F("rack_id", "string", (0, ANY), nullable=(0, ANY)),
            F("member_epoch", "int32", (0, ANY)),
            F("client_id", "string", (0, ANY)),
            F("client_host", "string", (0, ANY)),
            F("subscribed_topic_names", "array", (0, ANY), element="string"),
            F("subscribed_topic_regex", "string", (0, ANY), nullable=(0, ANY)),
            F("assignment", "struct", (0, ANY), struct="Assignment", fields=(
                F("topic_partitions", "array", (0, ANY), struct="TopicPartitions", element="struct", fields=(
                    F("topic_id", "uuid", (0, ANY), meaning="topic_id"),
                    F("topic_name", "string", (0, ANY)),
                    F("partitions", "array", (0, ANY), element="int32"),
                )),
            )),
            F("target_assignment", "struct", (0, ANY), struct="Assignment", fields=(
                F("topic_partitions", "array", (0, ANY), struct="TopicPartitions", element="struct", fields=(
                    F("topic_id", "uuid", (0, ANY), meaning="topic_id"),
                    F("topic_name", "string", (0, ANY)),
                    F("partitions", "array", (0, ANY), element="int32"),
                )),
            )),
            F("member_type", "int8", (1, ANY)),
        )),
        F("authorized_operations", "int32", (0, ANY)),
    )),
), kafka4_versions=(0, 1), listeners=("broker",))

APIS[70] = ApiDef(70, "ControllerRegistration", 0, 0, 0, request=(
    F("controller_id", "int32", (0, ANY)),
    F("incarnation_id", "uuid", (0, ANY)),
    F("zk_migration_ready", "bool", (0, ANY)),
    F("listeners", "array", (0, ANY), struct="Listener", element="struct", fields=(
        F("name", "string", (0, ANY)),
        F("host", "string", (0, ANY)),
        F("port", "uint16", (0, ANY)),
        F("security_protocol", "int16", (0, ANY)),
    )),
    F("features", "array", (0, ANY), struct="Feature", element="struct", fields=(
        F("name", "string", (0, ANY)),
        F("min_supported_version", "int16", (0, ANY)),
        F("max_supported_version", "int16", (0, ANY)),
    )),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("error_code", "int16", (0, ANY), meaning="error_code"),
    F("error_message", "string", (0, ANY), nullable=(0, ANY)),
), kafka4_versions=(0, 0), listeners=("controller",))

APIS[71] = ApiDef(71, "GetTelemetrySubscriptions", 0, 0, 0, request=(
    F("client_instance_id", "uuid", (0, ANY)),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("error_code", "int16", (0, ANY), meaning="error_code"),
    F("client_instance_id", "uuid", (0, ANY)),
    F("subscription_id", "int32", (0, ANY)),
    F("accepted_compression_types", "array", (0, ANY), element="int8"),
    F("push_interval_ms", "int32", (0, ANY)),
    F("telemetry_max_bytes", "int32", (0, ANY)),
    F("delta_temporality", "bool", (0, ANY)),
    F("requested_metrics", "array", (0, ANY), element="string"),
), kafka4_versions=(0, 0), listeners=("broker",))

APIS[72] = ApiDef(72, "PushTelemetry", 0, 0, 0, request=(
    F("client_instance_id", "uuid", (0, ANY)),
    F("subscription_id", "int32", (0, ANY)),
    F("terminating", "bool", (0, ANY)),
    F("compression_type", "int8", (0, ANY)),
    F("metrics", "bytes", (0, ANY)),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("error_code", "int16", (0, ANY), meaning="error_code"),
), kafka4_versions=(0, 0), listeners=("broker",))

APIS[73] = ApiDef(73, "AssignReplicasToDirs", 0, 0, 0, request=(
    F("broker_id", "int32", (0, ANY)),
    F("broker_epoch", "int64", (0, ANY)),
    F("directories", "array", (0, ANY), struct="DirectoryData", element="struct", fields=(
        F("id", "uuid", (0, ANY)),
        F("topics", "array", (0, ANY), struct="TopicData", element="struct", fields=(
            F("topic_id", "uuid", (0, ANY), meaning="topic_id"),
            F("partitions", "array", (0, ANY), struct="PartitionData", element="struct", fields=(
                F("partition_index", "int32", (0, ANY)),
            )),
        )),
    )),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("error_code", "int16", (0, ANY), meaning="error_code"),
    F("directories", "array", (0, ANY), struct="DirectoryData", element="struct", fields=(
        F("id", "uuid", (0, ANY)),
        F("topics", "array", (0, ANY), struct="TopicData", element="struct", fields=(
            F("topic_id", "uuid", (0, ANY), meaning="topic_id"),
            F("partitions", "array", (0, ANY), struct="PartitionData", element="struct", fields=(
                F("partition_index", "int32", (0, ANY)),
                F("error_code", "int16", (0, ANY), meaning="error_code"),
            )),
        )),
    )),
), kafka4_versions=(0, 0), listeners=("controller",))

APIS[74] = ApiDef(74, "ListConfigResources", 0, 1, 0, request=(
    F("resource_types", "array", (1, ANY), element="int8"),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("error_code", "int16", (0, ANY), meaning="error_code"),
    F("config_resources", "array", (0, ANY), struct="ConfigResource", element="struct", fields=(
        F("resource_name", "string", (0, ANY)),
        F("resource_type", "int8", (1, ANY), meaning="resource_type"),
    )),
), kafka4_versions=(0, 1), listeners=("broker",))

APIS[75] = ApiDef(75, "DescribeTopicPartitions", 0, 0, 0, request=(
    F("topics", "array", (0, ANY), struct="TopicRequest", element="struct", fields=(
        F("name", "string", (0, ANY)),
    )),
    F("response_partition_limit", "int32", (0, ANY)),
    F("cursor", "struct", (0, ANY), nullable=(0, ANY), struct="Cursor", fields=(
        F("topic_name", "string", (0, ANY)),
        F("partition_index", "int32", (0, ANY)),
    )),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("topics", "array", (0, ANY), struct="DescribeTopicPartitionsResponseTopic", element="struct", fields=(
        F("error_code", "int16", (0, ANY), meaning="error_code"),
        F("name", "string", (0, ANY), nullable=(0, ANY)),
        F("topic_id", "uuid", (0, ANY), meaning="topic_id"),
        F("is_internal", "bool", (0, ANY)),
        F("partitions", "array", (0, ANY), struct="DescribeTopicPartitionsResponsePartition", element="struct", fields=(
            F("error_code", "int16", (0, ANY), meaning="error_code"),
            F("partition_index", "int32", (0, ANY)),
            F("leader_id", "int32", (0, ANY)),
            F("leader_epoch", "int32", (0, ANY)),
            F("replica_nodes", "array", (0, ANY), element="int32"),
            F("isr_nodes", "array", (0, ANY), element="int32"),
            F("eligible_leader_replicas", "array", (0, ANY), nullable=(0, ANY), element="int32"),
            F("last_known_elr", "array", (0, ANY), nullable=(0, ANY), element="int32"),
            F("offline_replicas", "array", (0, ANY), element="int32"),
        )),
        F("topic_authorized_operations", "int32", (0, ANY)),
    )),
    F("next_cursor", "struct", (0, ANY), nullable=(0, ANY), struct="Cursor", fields=(
        F("topic_name", "string", (0, ANY)),
        F("partition_index", "int32", (0, ANY)),
    )),
), kafka4_versions=(0, 0), listeners=("broker",))

APIS[76] = ApiDef(76, "ShareGroupHeartbeat", 0, 1, 0, request=(
    F("group_id", "string", (0, ANY)),
    F("member_id", "string", (0, ANY)),
    F("member_epoch", "int32", (0, ANY)),
    F("rack_id", "string", (0, ANY), nullable=(0, ANY)),
    F("subscribed_topic_names", "array", (0, ANY), nullable=(0, ANY), element="string"),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("error_code", "int16", (0, ANY), meaning="error_code"),
    F("error_message", "string", (0, ANY), nullable=(0, ANY)),
    F("member_id", "string", (0, ANY), nullable=(0, ANY)),
    F("member_epoch", "int32", (0, ANY)),
    F("heartbeat_interval_ms", "int32", (0, ANY)),
    F("assignment", "struct", (0, ANY), nullable=(0, ANY), struct="Assignment", fields=(
        F("topic_partitions", "array", (0, ANY), struct="TopicPartitions", element="struct", fields=(
            F("topic_id", "uuid", (0, ANY), meaning="topic_id"),
            F("partitions", "array", (0, ANY), element="int32"),
        )),
    )),
), kafka4_versions=(1, 1), listeners=("broker",))

APIS[77] = ApiDef(77, "ShareGroupDescribe", 0, 1, 0, request=(
    F("group_ids", "array", (0, ANY), element="string"),
    F("include_authorized_operations", "bool", (0, ANY)),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("groups", "array", (0, ANY), struct="DescribedGroup", element="struct", fields=(
        F("error_code", "int16", (0, ANY), meaning="error_code"),
        F("error_message", "string", (0, ANY), nullable=(0, ANY)),
        F("group_id", "string", (0, ANY)),
        F("group_state", "string", (0, ANY)),
        F("group_epoch", "int32", (0, ANY)),
        F("assignment_epoch", "int32", (0, ANY)),
        F("assignor_name", "string", (0, ANY)),
        F("members", "array", (0, ANY), struct="Member", element="struct", fields=(
            F("member_id", "string", (0, ANY)),
            F("rack_id", "string", (0, ANY), nullable=(0, ANY)),
            F("member_epoch", "int32", (0, ANY)),
            F("client_id", "string", (0, ANY)),
            F("client_host", "string", (0, ANY)),
            F("subscribed_topic_names", "array", (0, ANY), element="string"),
            F("assignment", "struct", (0, ANY), struct="Assignment", fields=(
                F("topic_partitions", "array", (0, ANY), struct="TopicPartitions", element="struct", fields=(
                    F("topic_id", "uuid", (0, ANY), meaning="topic_id"),
                    F("topic_name", "string", (0, ANY)),
                    F("partitions", "array", (0, ANY), element="int32"),
                )),
            )),
        )),
        F("authorized_operations", "int32", (0, ANY)),
    )),
), kafka4_versions=(1, 1), listeners=("broker",))

APIS[78] = ApiDef(78, "ShareFetch", 0, 2, 0, request=(
    F("group_id", "string", (0, ANY), nullable=(0, ANY)),
    F("member_id", "string", (0, ANY), nullable=(0, ANY)),
    F("share_session_epoch", "int32", (0, ANY)),
    F("max_wait_ms", "int32", (0, ANY)),
    F("min_bytes", "int32", (0, ANY)),
    F("max_bytes", "int32", (0, ANY)),
    F("max_records", "int32", (1, ANY)),
    F("batch_size", "int32", (1, ANY)),
    F("share_acquire_mode", "int8", (2, ANY)),
    F("is_renew_ack", "bool", (2, ANY)),
    F("topics", "array", (0, ANY), struct="FetchTopic", element="struct", fields=(
        F("topic_id", "uuid", (0, ANY), meaning="topic_id"),
        F("partitions", "array", (0, ANY), struct="FetchPartition", element="struct", fields=(
            F("partition_index", "int32", (0, ANY)),
            F("partition_max_bytes", "int32", (0, 0)),
            F("acknowledgement_batches", "array", (0, ANY), struct="AcknowledgementBatch", element="struct", fields=(
                F("first_offset", "int64", (0, ANY)),
                F("last_offset", "int64", (0, ANY)),
                F("acknowledge_types", "array", (0, ANY), element="int8"),
            )),
        )),
    )),
    F("forgotten_topics_data", "array", (0, ANY), struct="ForgottenTopic", element="struct", fields=(
        F("topic_id", "uuid", (0, ANY), meaning="topic_id"),
        F("partitions", "array", (0, ANY), element="int32"),
    )),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("error_code", "int16", (0, ANY), meaning="error_code"),
    F("error_message", "string", (0, ANY), nullable=(0, ANY)),
    F("acquisition_lock_timeout_ms", "int32", (1, ANY)),
    F("responses", "array", (0, ANY), struct="ShareFetchableTopicResponse", element="struct", fields=(
        F("topic_id", "uuid", (0, ANY), meaning="topic_id"),
        F("partitions", "array", (0, ANY), struct="PartitionData", element="struct", fields=(
            F("partition_index", "int32", (0, ANY)),
            F("error_code", "int16", (0, ANY), meaning="error_code"),
            F("error_message", "string", (0, ANY), nullable=(0, ANY)),
            F("acknowledge_error_code", "int16", (0, ANY), meaning="error_code"),
            F("acknowledge_error_message", "string", (0, ANY), nullable=(0, ANY)),
            F("current_leader", "struct", (0, ANY), struct="LeaderIdAndEpoch", fields=(
                F("leader_id", "int32", (0, ANY)),
                F("leader_epoch", "int32", (0, ANY)),
            )),
            F("records", "records", (0, ANY), nullable=(0, 0)),
            F("acquired_records", "array", (0, ANY), struct="AcquiredRecords", element="struct", fields=(
                F("first_offset", "int64", (0, ANY)),
                F("last_offset", "int64", (0, ANY)),
                F("delivery_count", "int16", (0, ANY)),
            )),
        )),
    )),
    F("node_endpoints", "array", (0, ANY), struct="NodeEndpoint", element="struct", fields=(
        F("node_id", "int32", (0, ANY)),
        F("host", "string", (0, ANY)),
        F("port", "int32", (0, ANY)),
        F("rack", "string", (0, ANY), nullable=(0, ANY)),
    )),
), kafka4_versions=(1, 2), listeners=("broker",))

APIS[79] = ApiDef(79, "ShareAcknowledge", 0, 2, 0, request=(
    F("group_id", "string", (0, ANY), nullable=(0, ANY)),
    F("member_id", "string", (0, ANY), nullable=(0, ANY)),
    F("share_session_epoch", "int32", (0, ANY)),
    F("is_renew_ack", "bool", (2, ANY)),
    F("topics", "array", (0, ANY), struct="AcknowledgeTopic", element="struct", fields=(
        F("topic_id", "uuid", (0, ANY), meaning="topic_id"),
        F("partitions", "array", (0, ANY), struct="AcknowledgePartition", element="struct", fields=(
            F("partition_index", "int32", (0, ANY)),
            F("acknowledgement_batches", "array", (0, ANY), struct="AcknowledgementBatch", element="struct", fields=(
                F("first_offset", "int64", (0, ANY)),
                F("last_offset", "int64", (0, ANY)),
                F("acknowledge_types", "array", (0, ANY), element="int8"),
            )),
        )),
    )),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("error_code", "int16", (0, ANY), meaning="error_code"),
    F("error_message", "string", (0, ANY), nullable=(0, ANY)),
    F("acquisition_lock_timeout_ms", "int32", (2, ANY)),
    F("responses", "array", (0, ANY), struct="ShareAcknowledgeTopicResponse", element="struct", fields=(
        F("topic_id", "uuid", (0, ANY), meaning="topic_id"),
        F("partitions", "array", (0, ANY), struct="PartitionData", element="struct", fields=(
            F("partition_index", "int32", (0, ANY)),
            F("error_code", "int16", (0, ANY), meaning="error_code"),
            F("error_message", "string", (0, ANY), nullable=(0, ANY)),
            F("current_leader", "struct", (0, ANY), struct="LeaderIdAndEpoch", fields=(
                F("leader_id", "int32", (0, ANY)),
                F("leader_epoch", "int32", (0, ANY)),
            )),
        )),
    )),
    F("node_endpoints", "array", (0, ANY), struct="NodeEndpoint", element="struct", fields=(
        F("node_id", "int32", (0, ANY)),
        F("host", "string", (0, ANY)),
        F("port", "int32", (0, ANY)),
        F("rack", "string", (0, ANY), nullable=(0, ANY)),
    )),
), kafka4_versions=(1, 2), listeners=("broker",))

APIS[80] = ApiDef(80, "AddRaftVoter", 0, 1, 0, request=(
    F("cluster_id", "string", (0, ANY), nullable=(0, ANY)),
    F("timeout_ms", "int32", (0, ANY)),
    F("voter_id", "int32", (0, ANY)),
    F("voter_directory_id", "uuid", (0, ANY)),
    F("listeners", "array", (0, ANY), struct="Listener", element="struct", fields=(
        F("name", "string", (0, ANY)),
        F("host", "string", (0, ANY)),
        F("port", "uint16", (0, ANY)),
    )),
    F("ack_when_committed", "bool", (1, ANY)),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("error_code", "int16", (0, ANY), meaning="error_code"),
    F("error_message", "string", (0, ANY), nullable=(0, ANY)),
), kafka4_versions=(0, 1), listeners=("controller", "broker"))

APIS[81] = ApiDef(81, "RemoveRaftVoter", 0, 0, 0, request=(
    F("cluster_id", "string", (0, ANY), nullable=(0, ANY)),
    F("voter_id", "int32", (0, ANY)),
    F("voter_directory_id", "uuid", (0, ANY)),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("error_code", "int16", (0, ANY), meaning="error_code"),
    F("error_message", "string", (0, ANY), nullable=(0, ANY)),
), kafka4_versions=(0, 0), listeners=("controller", "broker"))

APIS[82] = ApiDef(82, "UpdateRaftVoter", 0, 0, 0, request=(
    F("cluster_id", "string", (0, ANY), nullable=(0, ANY)),
    F("current_leader_epoch", "int32", (0, ANY)),
    F("voter_id", "int32", (0, ANY)),
    F("voter_directory_id", "uuid", (0, ANY)),
    F("listeners", "array", (0, ANY), struct="Listener", element="struct", fields=(
        F("name", "string", (0, ANY)),
        F("host", "string", (0, ANY)),
        F("port", "uint16", (0, ANY)),
    )),
    F("kraft_version_feature", "struct", (0, ANY), struct="KRaftVersionFeature", fields=(
        F("min_supported_version", "int16", (0, ANY)),
        F("max_supported_version", "int16", (0, ANY)),
    )),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("error_code", "int16", (0, ANY), meaning="error_code"),
    F("current_leader", "struct", (0, ANY), tag=0, tagged=(0, ANY), struct="CurrentLeader", fields=(
        F("leader_id", "int32", (0, ANY)),
        F("leader_epoch", "int32", (0, ANY)),
        F("host", "string", (0, ANY)),
        F("port", "int32", (0, ANY)),
    )),
), kafka4_versions=(0, 0), listeners=("controller",))

APIS[83] = ApiDef(83, "InitializeShareGroupState", 0, 0, 0, request=(
    F("group_id", "string", (0, ANY)),
    F("topics", "array", (0, ANY), struct="InitializeStateData", element="struct", fields=(
        F("topic_id", "uuid", (0, ANY), meaning="topic_id"),
        F("partitions", "array", (0, ANY), struct="PartitionData", element="struct", fields=(
            F("partition", "int32", (0, ANY)),
            F("state_epoch", "int32", (0, ANY)),
            F("start_offset", "int64", (0, ANY)),
        )),
    )),
), response=(
    F("results", "array", (0, ANY), struct="InitializeStateResult", element="struct", fields=(
        F("topic_id", "uuid", (0, ANY), meaning="topic_id"),
        F("partitions", "array", (0, ANY), struct="PartitionResult", element="struct", fields=(
            F("partition", "int32", (0, ANY)),
            F("error_code", "int16", (0, ANY), meaning="error_code"),
            F("error_message", "string", (0, ANY), nullable=(0, ANY)),
        )),
    )),
), kafka4_versions=(0, 0), listeners=("broker",))

APIS[84] = ApiDef(84, "ReadShareGroupState", 0, 0, 0, request=(
    F("group_id", "string", (0, ANY)),
    F("topics", "array", (0, ANY), struct="ReadStateData", element="struct", fields=(
        F("topic_id", "uuid", (0, ANY), meaning="topic_id"),
        F("partitions", "array", (0, ANY), struct="PartitionData", element="struct", fields=(
            F("partition", "int32", (0, ANY)),
            F("leader_epoch", "int32", (0, ANY)),
        )),
    )),
), response=(
    F("results", "array", (0, ANY), struct="ReadStateResult", element="struct", fields=(
        F("topic_id", "uuid", (0, ANY), meaning="topic_id"),
        F("partitions", "array", (0, ANY), struct="PartitionResult", element="struct", fields=(
            F("partition", "int32", (0, ANY)),
            F("error_code", "int16", (0, ANY), meaning="error_code"),
            F("error_message", "string", (0, ANY), nullable=(0, ANY)),
            F("state_epoch", "int32", (0, ANY)),
            F("start_offset", "int64", (0, ANY)),
            F("state_batches", "array", (0, ANY), struct="StateBatch", element="struct", fields=(
                F("first_offset", "int64", (0, ANY)),
                F("last_offset", "int64", (0, ANY)),
                F("delivery_state", "int8", (0, ANY)),
                F("delivery_count", "int16", (0, ANY)),
            )),
        )),
    )),
), kafka4_versions=(0, 0), listeners=("broker",))

APIS[85] = ApiDef(85, "WriteShareGroupState", 0, 1, 0, request=(
    F("group_id", "string", (0, ANY)),
    F("topics", "array", (0, ANY), struct="WriteStateData", element="struct", fields=(
        F("topic_id", "uuid", (0, ANY), meaning="topic_id"),
        F("partitions", "array", (0, ANY), struct="PartitionData", element="struct", fields=(
            F("partition", "int32", (0, ANY)),
            F("state_epoch", "int32", (0, ANY)),
            F("leader_epoch", "int32", (0, ANY)),
            F("start_offset", "int64", (0, ANY)),
            F("delivery_complete_count", "int32", (1, ANY)),
            F("state_batches", "array", (0, ANY), struct="StateBatch", element="struct", fields=(
                F("first_offset", "int64", (0, ANY)),
                F("last_offset", "int64", (0, ANY)),
                F("delivery_state", "int8", (0, ANY)),
                F("delivery_count", "int16", (0, ANY)),
            )),
        )),
    )),
), response=(
    F("results", "array", (0, ANY), struct="WriteStateResult", element="struct", fields=(
        F("topic_id", "uuid", (0, ANY), meaning="topic_id"),
        F("partitions", "array", (0, ANY), struct="PartitionResult", element="struct", fields=(
            F("partition", "int32", (0, ANY)),
            F("error_code", "int16", (0, ANY), meaning="error_code"),
            F("error_message", "string", (0, ANY), nullable=(0, ANY)),
        )),
    )),
), kafka4_versions=(0, 1), listeners=("broker",))

APIS[86] = ApiDef(86, "DeleteShareGroupState", 0, 0, 0, request=(
    F("group_id", "string", (0, ANY)),
    F("topics", "array", (0, ANY), struct="DeleteStateData", element="struct", fields=(
        F("topic_id", "uuid", (0, ANY), meaning="topic_id"),
        F("partitions", "array", (0, ANY), struct="PartitionData", element="struct", fields=(
            F("partition", "int32", (0, ANY)),
        )),
    )),
), response=(
    F("results", "array", (0, ANY), struct="DeleteStateResult", element="struct", fields=(
        F("topic_id", "uuid", (0, ANY), meaning="topic_id"),
        F("partitions", "array", (0, ANY), struct="PartitionResult", element="struct", fields=(
            F("partition", "int32", (0, ANY)),
            F("error_code", "int16", (0, ANY), meaning="error_code"),
            F("error_message", "string", (0, ANY), nullable=(0, ANY)),
        )),
    )),
), kafka4_versions=(0, 0), listeners=("broker",))

APIS[87] = ApiDef(87, "ReadShareGroupStateSummary", 0, 1, 0, request=(
    F("group_id", "string", (0, ANY)),
    F("topics", "array", (0, ANY), struct="ReadStateSummaryData", element="struct", fields=(
        F("topic_id", "uuid", (0, ANY), meaning="topic_id"),
        F("partitions", "array", (0, ANY), struct="PartitionData", element="struct", fields=(
            F("partition", "int32", (0, ANY)),
            F("leader_epoch", "int32", (0, ANY)),
        )),
    )),
), response=(
    F("results", "array", (0, ANY), struct="ReadStateSummaryResult", element="struct", fields=(
        F("topic_id", "uuid", (0, ANY), meaning="topic_id"),
        F("partitions", "array", (0, ANY), struct="PartitionResult", element="struct", fields=(
            F("partition", "int32", (0, ANY)),
            F("error_code", "int16", (0, ANY), meaning="error_code"),
            F("error_message", "string", (0, ANY), nullable=(0, ANY)),
            F("state_epoch", "int32", (0, ANY)),
            F("leader_epoch", "int32", (0, ANY)),
            F("start_offset", "int64", (0, ANY)),
            F("delivery_complete_count", "int32", (1, ANY)),
        )),
    )),
), kafka4_versions=(0, 1), listeners=("broker",))

APIS[88] = ApiDef(88, "StreamsGroupHeartbeat", 0, 1, 0, request=(
    F("group_id", "string", (0, ANY)),
    F("member_id", "string", (0, ANY)),
    F("member_epoch", "int32", (0, ANY)),
    F("endpoint_information_epoch", "int32", (0, ANY)),
    F("instance_id", "string", (0, ANY), nullable=(0, ANY)),
    F("rack_id", "string", (0, ANY), nullable=(0, ANY)),
    F("rebalance_timeout_ms", "int32", (0, ANY)),
    F("topology", "struct", (0, ANY), nullable=(0, ANY), struct="Topology", fields=(
        F("epoch", "int32", (0, ANY)),
        F("subtopologies", "array", (0, ANY), struct="Subtopology", element="struct", fields=(
            F("subtopology_id", "string", (0, ANY)),
            F("source_topics", "array", (0, ANY), element="string"),
            F("source_topic_regex", "array", (0, ANY), element="string"),
            F("state_changelog_topics", "array", (0, ANY), struct="TopicInfo", element="struct", fields=(
                F("name", "string", (0, ANY)),
                F("partitions", "int32", (0, ANY)),
                F("replication_factor", "int16", (0, ANY)),
                F("topic_configs", "array", (0, ANY), struct="KeyValue", element="struct", fields=(
                    F("key", "string", (0, ANY)),
                    F("value", "string", (0, ANY)),
                )),
            )),
            F("repartition_sink_topics", "array", (0, ANY), element="string"),
            F("repartition_source_topics", "array", (0, ANY), struct="TopicInfo", element="struct", fields=(
                F("name", "string", (0, ANY)),
                F("partitions", "int32", (0, ANY)),
                F("replication_factor", "int16", (0, ANY)),
                F("topic_configs", "array", (0, ANY), struct="KeyValue", element="struct", fields=(
                    F("key", "string", (0, ANY)),
                    F("value", "string", (0, ANY)),
                )),
            )),
            F("copartition_groups", "array", (0, ANY), struct="CopartitionGroup", element="struct", fields=(
                F("source_topics", "array", (0, ANY), element="int16"),
                F("source_topic_regex", "array", (0, ANY), element="int16"),
                F("repartition_source_topics", "array", (0, ANY), element="int16"),
            )),
        )),
    )),
    F("active_tasks", "array", (0, ANY), nullable=(0, ANY), struct="TaskIds", element="struct", fields=(
        F("subtopology_id", "string", (0, ANY)),
        F("partitions", "array", (0, ANY), element="int32"),
    )),
    F("standby_tasks", "array", (0, ANY), nullable=(0, ANY), struct="TaskIds", element="struct", fields=(
        F("subtopology_id", "string", (0, ANY)),
        F("partitions", "array", (0, ANY), element="int32"),
    )),
    F("warmup_tasks", "array", (0, ANY), nullable=(0, ANY), struct="TaskIds", element="struct", fields=(
        F("subtopology_id", "string", (0, ANY)),
        F("partitions", "array", (0, ANY), element="int32"),
    )),
    F("process_id", "string", (0, ANY), nullable=(0, ANY)),
    F("user_endpoint", "struct", (0, ANY), nullable=(0, ANY), struct="Endpoint", fields=(
        F("host", "string", (0, ANY)),
        F("port", "uint16", (0, ANY)),
    )),
    F("client_tags", "array", (0, ANY), nullable=(0, ANY), struct="KeyValue", element="struct", fields=(
        F("key", "string", (0, ANY)),
        F("value", "string", (0, ANY)),
    )),
    F("task_offsets", "array", (0, ANY), nullable=(0, ANY), struct="TaskOffset", element="struct", fields=(
        F("subtopology_id", "string", (0, ANY)),
        F("partition", "int32", (0, ANY)),
        F("offset", "int64", (0, ANY)),
    )),
    F("task_end_offsets", "array", (0, ANY), nullable=(0, ANY), struct="TaskOffset", element="struct", fields=(
        F("subtopology_id", "string", (0, ANY)),
        F("partition", "int32", (0, ANY)),
        F("offset", "int64", (0, ANY)),
    )),
    F("shutdown_application", "bool", (0, ANY)),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("error_code", "int16", (0, ANY), meaning="error_code"),
    F("error_message", "string", (0, ANY), nullable=(0, ANY)),
    F("member_id", "string", (0, ANY)),
    F("member_epoch", "int32", (0, ANY)),
    F("heartbeat_interval_ms", "int32", (0, ANY)),
    F("acceptable_recovery_lag_legacy", "int32", (0, 0)),
    F("task_offset_interval_ms", "int32", (0, ANY)),
    F("acceptable_recovery_lag", "int64", (1, ANY)),
    F("status", "array", (0, ANY), nullable=(0, ANY), struct="Status", element="struct", fields=(
        F("status_code", "int8", (0, ANY)),
        F("status_detail", "string", (0, ANY)),
    )),
    F("active_tasks", "array", (0, ANY), nullable=(0, ANY), struct="TaskIds", element="struct", fields=(
        F("subtopology_id", "string", (0, ANY)),
        F("partitions", "array", (0, ANY), element="int32"),
    )),
    F("standby_tasks", "array", (0, ANY), nullable=(0, ANY), struct="TaskIds", element="struct", fields=(
        F("subtopology_id", "string", (0, ANY)),
        F("partitions", "array", (0, ANY), element="int32"),
    )),
    F("warmup_tasks", "array", (0, ANY), nullable=(0, ANY), struct="TaskIds", element="struct", fields=(
        F("subtopology_id", "string", (0, ANY)),
        F("partitions", "array", (0, ANY), element="int32"),
    )),
    F("topology_description_required", "bool", (1, ANY)),
    F("endpoint_information_epoch", "int32", (0, ANY)),
    F("partitions_by_user_endpoint", "array", (0, ANY), nullable=(0, ANY), struct="EndpointToPartitions", element="struct", fields=(
        F("user_endpoint", "struct", (0, ANY), struct="Endpoint", fields=(
            F("host", "string", (0, ANY)),
            F("port", "uint16", (0, ANY)),
        )),
        F("active_partitions", "array", (0, ANY), struct="TopicPartition", element="struct", fields=(
            F("topic", "string", (0, ANY)),
            F("partitions", "array", (0, ANY), element="int32"),
        )),
        F("standby_partitions", "array", (0, ANY), struct="TopicPartition", element="struct", fields=(
            F("topic", "string", (0, ANY)),
            F("partitions", "array", (0, ANY), element="int32"),
        )),
    )),
), kafka4_versions=(0, 1), listeners=("broker",))

APIS[89] = ApiDef(89, "StreamsGroupDescribe", 0, 1, 0, request=(
    F("group_ids", "array", (0, ANY), element="string"),
    F("include_authorized_operations", "bool", (0, ANY)),
    F("include_topology_description", "bool", (1, ANY)),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("groups", "array", (0, ANY), struct="DescribedGroup", element="struct", fields=(
        F("error_code", "int16", (0, ANY), meaning="error_code"),
        F("error_message", "string", (0, ANY), nullable=(0, ANY)),
        F("group_id", "string", (0, ANY)),
        F("group_state", "string", (0, ANY)),
        F("group_epoch", "int32", (0, ANY)),
        F("assignment_epoch", "int32", (0, ANY)),
        F("topology", "struct", (0, ANY), nullable=(0, ANY), struct="Topology", fields=(
            F("epoch", "int32", (0, ANY)),
            F("subtopologies", "array", (0, ANY), nullable=(0, ANY), struct="Subtopology", element="struct", fields=(
                F("subtopology_id", "string", (0, ANY)),
                F("source_topics", "array", (0, ANY), element="string"),
                F("repartition_sink_topics", "array", (0, ANY), element="string"),
                F("state_changelog_topics", "array", (0, ANY), struct="TopicInfo", element="struct", fields=(
                    F("name", "string", (0, ANY)),
                    F("partitions", "int32", (0, ANY)),
                    F("replication_factor", "int16", (0, ANY)),
                    F("topic_configs", "array", (0, ANY), struct="KeyValue", element="struct", fields=(
                        F("key", "string", (0, ANY)),
                        F("value", "string", (0, ANY)),
                    )),
                )),
                F("repartition_source_topics", "array", (0, ANY), struct="TopicInfo", element="struct", fields=(
                    F("name", "string", (0, ANY)),
                    F("partitions", "int32", (0, ANY)),
                    F("replication_factor", "int16", (0, ANY)),
                    F("topic_configs", "array", (0, ANY), struct="KeyValue", element="struct", fields=(
                        F("key", "string", (0, ANY)),
                        F("value", "string", (0, ANY)),
                    )),
                )),
            )),
        )),
        F("members", "array", (0, ANY), struct="Member", element="struct", fields=(
            F("member_id", "string", (0, ANY)),
            F("member_epoch", "int32", (0, ANY)),
            F("instance_id", "string", (0, ANY), nullable=(0, ANY)),
            F("rack_id", "string", (0, ANY), nullable=(0, ANY)),
            F("client_id", "string", (0, ANY)),
            F("client_host", "string", (0, ANY)),
            F("topology_epoch", "int32", (0, ANY)),
            F("process_id", "string", (0, ANY)),
            F("user_endpoint", "struct", (0, ANY), nullable=(0, ANY), struct="Endpoint", fields=(
                F("host", "string", (0, ANY)),
                F("port", "uint16", (0, ANY)),
            )),
            F("client_tags", "array", (0, ANY), struct="KeyValue", element="struct", fields=(
                F("key", "string", (0, ANY)),
                F("value", "string", (0, ANY)),
            )),
            F("task_offsets", "array", (0, ANY), struct="TaskOffset", element="struct", fields=(
                F("subtopology_id", "string", (0, ANY)),
                F("partition", "int32", (0, ANY)),
                F("offset", "int64", (0, ANY)),
            )),
            F("task_end_offsets", "array", (0, ANY), struct="TaskOffset", element="struct", fields=(
                F("subtopology_id", "string", (0, ANY)),
                F("partition", "int32", (0, ANY)),
                F("offset", "int64", (0, ANY)),
            )),
            F("assignment", "struct", (0, ANY), struct="Assignment", fields=(
                F("active_tasks", "array", (0, ANY), struct="TaskIds", element="struct", fields=(
                    F("subtopology_id", "string", (0, ANY)),
                    F("partitions", "array", (0, ANY), element="int32"),
                )),
                F("standby_tasks", "array", (0, ANY), struct="TaskIds", element="struct", fields=(
                    F("subtopology_id", "string", (0, ANY)),
                    F("partitions", "array", (0, ANY), element="int32"),
                )),
                F("warmup_tasks", "array", (0, ANY), struct="TaskIds", element="struct", fields=(
                    F("subtopology_id", "string", (0, ANY)),
                    F("partitions", "array", (0, ANY), element="int32"),
                )),
            )),
            F("target_assignment", "struct", (0, ANY), struct="Assignment", fields=(
                F("active_tasks", "array", (0, ANY), struct="TaskIds", element="struct", fields=(
                    F("subtopology_id", "string", (0, ANY)),
                    F("partitions", "array", (0, ANY), element="int32"),
                )),
                F("standby_tasks", "array", (0, ANY), struct="TaskIds", element="struct", fields=(
                    F("subtopology_id", "string", (0, ANY)),
                    F("partitions", "array", (0, ANY), element="int32"),
                )),
                F("warmup_tasks", "array", (0, ANY), struct="TaskIds", element="struct", fields=(
                    F("subtopology_id", "string", (0, ANY)),
                    F("partitions", "array", (0, ANY), element="int32"),
                )),
            )),
            F("is_classic", "bool", (0, ANY)),
        )),
        F("authorized_operations", "int32", (0, ANY)),
        F("topology_description", "struct", (1, ANY), nullable=(1, ANY), struct="TopologyDescription", fields=(
            F("subtopologies", "array", (1, ANY), struct="TopologyDescriptionSubtopology", element="struct", fields=(
                F("subtopology_id", "string", (1, ANY)),
                F("nodes", "array", (1, ANY), struct="TopologyDescriptionNode", element="struct", fields=(
                    F("name", "string", (1, ANY)),
                    F("node_type", "int8", (1, ANY)),
                    F("source_topics", "array", (1, ANY), element="string"),
                    F("sink_topic", "string", (1, ANY), nullable=(1, ANY)),
                    F("stores", "array", (1, ANY), element="string"),
                    F("successors", "array", (1, ANY), element="string"),
                )),
            )),
            F("global_stores", "array", (1, ANY), struct="TopologyDescriptionGlobalStore", element="struct", fields=(
                F("source", "struct", (1, ANY), struct="TopologyDescriptionNode", fields=(
                    F("name", "string", (1, ANY)),
                    F("node_type", "int8", (1, ANY)),
                    F("source_topics", "array", (1, ANY), element="string"),
                    F("sink_topic", "string", (1, ANY), nullable=(1, ANY)),
                    F("stores", "array", (1, ANY), element="string"),
                    F("successors", "array", (1, ANY), element="string"),
                )),
                F("processor", "struct", (1, ANY), struct="TopologyDescriptionNode", fields=(
                    F("name", "string", (1, ANY)),
                    F("node_type", "int8", (1, ANY)),
                    F("source_topics", "array", (1, ANY), element="string"),
                    F("sink_topic", "string", (1, ANY), nullable=(1, ANY)),
                    F("stores", "array", (1, ANY), element="string"),
                    F("successors", "array", (1, ANY), element="string"),
                )),
            )),
        )),
        F("topology_description_status", "int8", (1, ANY)),
        F("assignor_name", "string", (1, ANY), nullable=(1, ANY)),
    )),
), kafka4_versions=(0, 1), listeners=("broker",))

APIS[90] = ApiDef(90, "DescribeShareGroupOffsets", 0, 1, 0, request=(
    F("groups", "array", (0, ANY), struct="DescribeShareGroupOffsetsRequestGroup", element="struct", fields=(
        F("group_id", "string", (0, ANY)),
        F("topics", "array", (0, ANY), nullable=(0, ANY), struct="DescribeShareGroupOffsetsRequestTopic", element="struct", fields=(
            F("topic_name", "string", (0, ANY)),
            F("partitions", "array", (0, ANY), element="int32"),
        )),
    )),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("groups", "array", (0, ANY), struct="DescribeShareGroupOffsetsResponseGroup", element="struct", fields=(
        F("group_id", "string", (0, ANY)),
        F("topics", "array", (0, ANY), struct="DescribeShareGroupOffsetsResponseTopic", element="struct", fields=(
            F("topic_name", "string", (0, ANY)),
            F("topic_id", "uuid", (0, ANY), meaning="topic_id"),
            F("partitions", "array", (0, ANY), struct="DescribeShareGroupOffsetsResponsePartition", element="struct", fields=(
                F("partition_index", "int32", (0, ANY)),
                F("start_offset", "int64", (0, ANY)),
                F("leader_epoch", "int32", (0, ANY)),
                F("lag", "int64", (1, ANY)),
                F("error_code", "int16", (0, ANY), meaning="error_code"),
                F("error_message", "string", (0, ANY), nullable=(0, ANY)),
            )),
        )),
        F("error_code", "int16", (0, ANY), meaning="error_code"),
        F("error_message", "string", (0, ANY), nullable=(0, ANY)),
    )),
), kafka4_versions=(0, 1), listeners=("broker",))

APIS[91] = ApiDef(91, "AlterShareGroupOffsets", 0, 0, 0, request=(
    F("group_id", "string", (0, ANY)),
    F("topics", "array", (0, ANY), struct="AlterShareGroupOffsetsRequestTopic", element="struct", fields=(
        F("topic_name", "string", (0, ANY)),
        F("partitions", "array", (0, ANY), struct="AlterShareGroupOffsetsRequestPartition", element="struct", fields=(
            F("partition_index", "int32", (0, ANY)),
            F("start_offset", "int64", (0, ANY)),
        )),
    )),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("error_code", "int16", (0, ANY), meaning="error_code"),
    F("error_message", "string", (0, ANY), nullable=(0, ANY)),
    F("responses", "array", (0, ANY), struct="AlterShareGroupOffsetsResponseTopic", element="struct", fields=(
        F("topic_name", "string", (0, ANY)),
        F("topic_id", "uuid", (0, ANY), meaning="topic_id"),
        F("partitions", "array", (0, ANY), struct="AlterShareGroupOffsetsResponsePartition", element="struct", fields=(
            F("partition_index", "int32", (0, ANY)),
            F("error_code", "int16", (0, ANY), meaning="error_code"),
            F("error_message", "string", (0, ANY), nullable=(0, ANY)),
        )),
    )),
), kafka4_versions=(0, 0), listeners=("broker",))

APIS[92] = ApiDef(92, "DeleteShareGroupOffsets", 0, 0, 0, request=(
    F("group_id", "string", (0, ANY)),
    F("topics", "array", (0, ANY), struct="DeleteShareGroupOffsetsRequestTopic", element="struct", fields=(
        F("topic_name", "string", (0, ANY)),
    )),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("error_code", "int16", (0, ANY), meaning="error_code"),
    F("error_message", "string", (0, ANY), nullable=(0, ANY)),
    F("responses", "array", (0, ANY), struct="DeleteShareGroupOffsetsResponseTopic", element="struct", fields=(
        F("topic_name", "string", (0, ANY)),
        F("topic_id", "uuid", (0, ANY), meaning="topic_id"),
        F("error_code", "int16", (0, ANY), meaning="error_code"),
        F("error_message", "string", (0, ANY), nullable=(0, ANY)),
    )),
), kafka4_versions=(0, 0), listeners=("broker",))

APIS[93] = ApiDef(93, "StreamsGroupTopologyDescriptionUpdate", 0, 0, 0, request=(
    F("group_id", "string", (0, ANY)),
    F("member_id", "string", (0, ANY)),
    F("topology_epoch", "int32", (0, ANY)),
    F("topology_description", "struct", (0, ANY), struct="TopologyDescription", fields=(
        F("subtopologies", "array", (0, ANY), struct="TopologyDescriptionSubtopology", element="struct", fields=(
            F("subtopology_id", "string", (0, ANY)),
            F("nodes", "array", (0, ANY), struct="TopologyDescriptionNode", element="struct", fields=(
                F("name", "string", (0, ANY)),
                F("node_type", "int8", (0, ANY)),
                F("source_topics", "array", (0, ANY), element="string"),
                F("sink_topic", "string", (0, ANY), nullable=(0, ANY)),
                F("stores", "array", (0, ANY), element="string"),
                F("successors", "array", (0, ANY), element="string"),
            )),
        )),
        F("global_stores", "array", (0, ANY), struct="TopologyDescriptionGlobalStore", element="struct", fields=(
            F("source", "struct", (0, ANY), struct="TopologyDescriptionNode", fields=(
                F("name", "string", (0, ANY)),
                F("node_type", "int8", (0, ANY)),
                F("source_topics", "array", (0, ANY), element="string"),
                F("sink_topic", "string", (0, ANY), nullable=(0, ANY)),
                F("stores", "array", (0, ANY), element="string"),
                F("successors", "array", (0, ANY), element="string"),
            )),
            F("processor", "struct", (0, ANY), struct="TopologyDescriptionNode", fields=(
                F("name", "string", (0, ANY)),
                F("node_type", "int8", (0, ANY)),
                F("source_topics", "array", (0, ANY), element="string"),
                F("sink_topic", "string", (0, ANY), nullable=(0, ANY)),
                F("stores", "array", (0, ANY), element="string"),
                F("successors", "array", (0, ANY), element="string"),
            )),
        )),
    )),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("error_code", "int16", (0, ANY), meaning="error_code"),
    F("error_message", "string", (0, ANY), nullable=(0, ANY)),
), kafka4_versions=(0, 0), listeners=("broker",))

APIS[94] = ApiDef(94, "UnregisterController", 0, 0, 0, request=(
    F("controller_id", "int32", (0, ANY)),
), response=(
    F("throttle_time_ms", "int32", (0, ANY)),
    F("error_code", "int16", (0, ANY), meaning="error_code"),
    F("error_message", "string", (0, ANY), nullable=(0, ANY)),
), kafka4_versions=(0, 0), listeners=("broker", "controller"))
