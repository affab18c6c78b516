"""Kafka's ZooKeeper-mode operations, written once over any MetadataStore.

What ``KafkaZkClient`` and ``AdminZkClient`` do in Kafka, for the broker, the controller and the
admin handlers, one module per kind of znode:

  znode_helpers     persistent paths made if missing (those every broker creates at startup), base64 UUIDs
  fencing           controller writes fenced by ``/controller_epoch``
  brokers           broker registration, broker id generation, the cluster id
  controller        the controller election and resignation, ``/feature``
  topics            topic names, replica assignments, creation, deletion requests, partition state
  configs           entity configs and their change notifications
  notifications     ISR-change and log-dir-event notifications written by brokers
  producer_ids      producer-id blocks
  consumer_offsets  ZooKeeper-era consumer offsets (OffsetCommit/OffsetFetch v0)

Every name is re-exported here (``layout.create_topic``), as are the replica placement functions of
``zk_compat.assignment`` through which the broker plans new topics and partitions. Kafka's refusals (topic
exists, bad assignment, ...) are raised as ``zk_compat.errors`` classes, each with its Kafka error code
(the broker's ``kbroker.errors.translate_zk()`` turns them into its own); store errors pass through unchanged.
"""
from __future__ import annotations

from zk_compat.assignment import (
    assign_replicas_for_new_partitions as assign_replicas_for_new_partitions,
    assign_replicas_to_brokers as assign_replicas_to_brokers,
)
from zk_compat.layout.brokers import (
    RESERVED_BROKER_MAX_ID as RESERVED_BROKER_MAX_ID,
    BrokerIdInUseError as BrokerIdInUseError,
    generate_broker_id as generate_broker_id,
    get_all_brokers as get_all_brokers,
    get_all_brokers_and_epochs as get_all_brokers_and_epochs,
    get_cluster_id as get_cluster_id,
    get_or_create_cluster_id as get_or_create_cluster_id,
    register_broker as register_broker,
)
from zk_compat.layout.configs import (
    ConfigChangeReader as ConfigChangeReader,
    broker_config_entity as broker_config_entity,
    change_broker_config as change_broker_config,
    change_entity_config as change_entity_config,
    create_config_change_notification as create_config_change_notification,
    get_broker_config as get_broker_config,
    get_entity_config as get_entity_config,
    set_entity_config as set_entity_config,
)
from zk_compat.layout.consumer_offsets import (
    commit_consumer_offset as commit_consumer_offset,
    get_consumer_offset as get_consumer_offset,
)
from zk_compat.layout.controller import (
    INITIAL_CONTROLLER_EPOCH as INITIAL_CONTROLLER_EPOCH,
    enable_feature_versioning as enable_feature_versioning,
    get_controller_epoch as get_controller_epoch,
    get_controller_id as get_controller_id,
    register_controller_and_increment_epoch as register_controller_and_increment_epoch,
    resign_controller as resign_controller,
)
from zk_compat.layout.fencing import ControllerMovedError as ControllerMovedError, fenced_multi as fenced_multi
from zk_compat.layout.notifications import (
    create_isr_change_notification as create_isr_change_notification,
    create_log_dir_event_notification as create_log_dir_event_notification,
    delete_log_dir_event_notifications as delete_log_dir_event_notifications,
)
from zk_compat.layout.producer_ids import claim_producer_id_block as claim_producer_id_block
from zk_compat.layout.topics import (
    NewTopicZNodes as NewTopicZNodes,
    create_partition_state as create_partition_state,
    create_partition_states as create_partition_states,
    create_topic as create_topic,
    create_topics as create_topics,
    create_topics_partition_states as create_topics_partition_states,
    delete_topic_znodes as delete_topic_znodes,
    delete_topics_znodes as delete_topics_znodes,
    get_all_topics as get_all_topics,
    get_partition_state as get_partition_state,
    get_topic_assignment as get_topic_assignment,
    get_topic_assignment_with_version as get_topic_assignment_with_version,
    get_topic_assignments as get_topic_assignments,
    get_topics_marked_for_deletion as get_topics_marked_for_deletion,
    mark_topic_for_deletion as mark_topic_for_deletion,
    mark_topics_for_deletion as mark_topics_for_deletion,
    set_partition_state as set_partition_state,
    set_partition_states as set_partition_states,
    set_topic_assignment as set_topic_assignment,
    topic_exists as topic_exists,
    validate_assignment as validate_assignment,
    validate_topic_name as validate_topic_name,
)
from zk_compat.layout.znode_helpers import (
    ensure_path as ensure_path,
    ensure_persistent_paths as ensure_persistent_paths,
    new_base64_uuid as new_base64_uuid,
)
