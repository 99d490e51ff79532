# cython: language_level=3
"""The rows the sFlow walk (:mod:`ingest.decode._sflow_compiled`) writes, laid out exactly as numpy lays out
their dtypes (``check_layouts`` proves it at import), and a sample's records as the walk reads them."""

from libc.stdint cimport int32_t, int64_t, uint8_t

from ingest.decode._sflow_packet cimport Parsed


cdef packed struct FlowRow:  # schemas.columns.FLOW_DTYPE
    int32_t export_protocol
    uint8_t exporter_addr[16]
    int64_t observation_domain
    int64_t sampler_id
    int64_t sampling_rate
    int64_t bytes
    int64_t packets
    int64_t bytes_est
    int64_t packets_est
    int32_t ip_version
    uint8_t src_addr[16]
    uint8_t dst_addr[16]
    int32_t src_port
    int32_t dst_port
    int32_t ip_protocol
    int32_t tcp_flags
    int32_t tos
    int32_t vlan
    int64_t in_if
    int64_t out_if
    int32_t direction
    int64_t time_start_ms
    int64_t time_end_ms
    int64_t time_received_ms
    int64_t time_export_ms
    int64_t vxlan_vni
    int32_t roce_opcode
    int64_t roce_dest_qp
    int32_t vlan_out
    int32_t vlan_priority_in
    int32_t vlan_priority_out
    uint8_t next_hop[16]
    uint8_t bgp_next_hop[16]


cdef packed struct SampleRow:  # ingest.decode.result.SAMPLE_DTYPE
    int64_t seq
    int64_t pool
    int64_t drops
    int64_t domain
    int64_t source
    int64_t rate
    int64_t received_ms


cdef packed struct CounterRow:  # schemas.columns.COUNTER_DTYPE
    uint8_t exporter_addr[16]
    int64_t observation_domain
    int64_t source_id
    int64_t sample_sequence
    int64_t time_received_ms
    int64_t agent_uptime_ms
    int64_t if_index
    int64_t if_type
    int64_t if_speed
    int32_t if_direction
    char if_admin_up
    char if_oper_up
    int64_t in_octets
    int64_t in_ucast_pkts
    int64_t in_mcast_pkts
    int64_t in_bcast_pkts
    int64_t in_discards
    int64_t in_errors
    int64_t in_unknown_protos
    int64_t out_octets
    int64_t out_ucast_pkts
    int64_t out_mcast_pkts
    int64_t out_bcast_pkts
    int64_t out_discards
    int64_t out_errors
    int64_t promiscuous
    char has_ethernet
    int64_t dot3_alignment_errors
    int64_t dot3_fcs_errors
    int64_t dot3_single_collision_frames
    int64_t dot3_multiple_collision_frames
    int64_t dot3_sqe_test_errors
    int64_t dot3_deferred_transmissions
    int64_t dot3_late_collisions
    int64_t dot3_excessive_collisions
    int64_t dot3_internal_mac_transmit_errors
    int64_t dot3_carrier_sense_errors
    int64_t dot3_frame_too_longs
    int64_t dot3_internal_mac_receive_errors
    int64_t dot3_symbol_errors


cdef packed struct DiscardRow:  # ingest.decode.result.DISCARD_DTYPE
    uint8_t exporter_addr[16]
    int64_t observation_domain
    int64_t source_id
    int64_t sample_sequence
    int64_t drops
    int64_t in_if
    int64_t out_if
    int32_t reason
    int32_t egress_queue
    int64_t time_received_ms
    int64_t bytes
    int32_t ip_version
    uint8_t src_addr[16]
    uint8_t dst_addr[16]
    int32_t src_port
    int32_t dst_port
    int32_t ip_protocol
    int32_t vlan
    int32_t roce_opcode



cdef struct Recs:  # a flow or discard sample's records
    Parsed parsed
    int64_t sw_vlan, sw1, sw2, sw3, frame_bytes, queue
    uint8_t next_hop[16]
