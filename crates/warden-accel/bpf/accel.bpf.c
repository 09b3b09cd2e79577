// SPDX-License-Identifier: GPL-2.0
// warden's same-node acceleration and iptables-free capture (Merbridge's design, see
// crates/warden-accel/README-like module docs in src/lib.rs):
//
//   wd_sockops     established sockets of the mesh (captured connections, the sidecar's
//                  listeners, the 127.0.0.6 passthrough) go into wd_sock_pairs by 4-tuple
//   wd_sk_msg      every send on such a socket is put straight into the peer's receive queue
//                  (BPF_F_INGRESS) when the peer is in the map; otherwise it goes through TCP,
//                  and so do the socket's later sends. Only the socket of the sender's own
//                  connection is a peer (initial sequence numbers, wd_isns: NAT can remap a
//                  port, and the mirrored tuple then names another connection's socket). An
//                  app's send skips both sidecars of a TCP relay they spliced (wd_splice),
//                  once the far one has delivered every byte sent before it
//   wd_connect4/6  the app's connect() goes to the sidecar's outbound port, and the sidecar's
//                  connect() to a meshed pod of this node to that pod's inbound port, so both
//                  ends of every leg see mirrored 4-tuples (iptables REDIRECT breaks that)
//   wd_getsockopt  answers SO_ORIGINAL_DST for connections connect4/6 rewrote, found by the
//                  connecting side's initial sequence number, not its port: conntrack can
//                  remap the port on the way (a stale entry of iptables REDIRECT clashes)
//   wd_getpeername4/6  an app's getpeername() on such a connection names where it connected
//                  (as with iptables REDIRECT), not the sidecar's listener; the
//                  sidecar's own calls are answered by the kernel
//   wd_setsockopt  a socket that takes a ULP (kTLS) is excluded from redirection
//
// Built with `clang -O2 -g -target bpf` (build.rs); bpf/accel.bpf.o is the checked-in build.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define AF_INET 2
#define AF_INET6 10
#define SOCK_STREAM 1
#define SOL_IP 0
#define SOL_TCP 6
#define SOL_IPV6 41
#define TCP_ULP 31
#define SO_ORIGINAL_DST 80
// The inbound passthrough's source (Istio's 127.0.0.6): sidecar -> app in the same pod.
#define PASSTHROUGH_SRC 0x7f000006

// Context and socket fields are read once each, in place: clang otherwise merges the loads
// of two branches into one load through a computed pointer, which the verifier refuses on
// these pointers ("pointer arithmetic on sock prohibited", "modified ctx ptr").
#define LD(x) (*(volatile typeof(x) *)&(x))

// Set per load by the loader (EbpfLoader::set_global): each cgroup's attachment knows its
// own sidecar.
const volatile __u32 proxy_uid = 1337;
const volatile __u32 outbound_port = 15001;
const volatile __u32 inbound_port = 15006;
// 0: only sidecar <-> sidecar sockets go into the map, the app's never do. A socket in a
// sockmap takes tcp_bpf_recvmsg, which returns EAGAIN from a *blocking* recv() woken by a
// state change with no data (the app's own shutdown(SHUT_WR), the ACK of its FIN).
const volatile __u32 app_legs = 1;
// Where an app's captured call is sent (host order): the pod's own IPv4 when the loader
// knows it, so the app's socket has the pod's address as under iptables REDIRECT (its
// getsockname() and the sidecar's view of the caller), else 127.0.0.1.
const volatile __u32 app_dial_ip4 = 0x7f000001;

// A socket's 4-tuple as the socket sees it (s = local). IPv4 is stored v4-mapped so a
// dual-stack socket and a plain IPv4 one agree. Loopback tuples carry the network
// namespace's cookie: every pod has its own 127.0.0.1, and the map is node-wide.
struct pair {
	__u64 netns;
	__u32 sip[4];
	__u32 dip[4];
	__u16 sport; // host order
	__u16 dport; // host order
	__u32 pad;
};

// Where a rewritten connect() was headed.
struct origin {
	__u32 ip[4]; // v4-mapped for IPv4
	__u16 port;  // host order
	__u16 family;
	__u32 flags; // ORIGIN_*
};

// The connect() was a sidecar's, to a meshed pod of this node (else an app's).
#define ORIGIN_SIDECAR 1

// What eBPF capture captures: `warden capture`'s selections (src/scope.rs fills these).
#define PORTS_MAX 24
#define CIDRS_MAX 16

struct cidr {
	__u32 ip[4];   // v4-mapped for IPv4, network order
	__u32 mask[4]; // network order
};

// The pod's own calls: everything but the excluded ports and CIDRs, within the included.
struct out_scope {
	__u32 n_ports;
	__u16 ports[PORTS_MAX];
	__u32 n_excluded;
	struct cidr excluded[CIDRS_MAX];
	__u32 included_all;
	__u32 n_included;
	struct cidr included[CIDRS_MAX];
};

// Calls to the pod: its ports that its sidecar's inbound listener serves.
struct in_scope {
	__u32 all_ports;
	__u32 n_ports;
	__u16 ports[PORTS_MAX];
	__u32 n_excluded;
	__u16 excluded[PORTS_MAX];
};

// A meshed pod of this node whose sidecar serves `inbound_port` (filled by user space).
struct pod {
	__u64 cgroup; // the cgroup id that registered it, so disable removes its own
	__u32 inbound_port;
	__u32 pad;
	struct in_scope in;
	__u32 pad2;
};

// This cgroup's pod: which of its calls connect4/6 capture (set per load, like proxy_uid).
const volatile struct out_scope out_scope = {.included_all = 1};

// Counter slots; src/counters.rs names them in the same order.
enum {
	C_INSERTED,
	C_INSERT_FAILED,
	C_REDIRECTED,
	C_REDIRECTED_BYTES,
	C_REDIRECT_MISSES,
	C_CAPTURE_OUTBOUND,
	C_CAPTURE_INBOUND,
	C_ORIGINAL_DST,
	C_ULP_PASSED,
	C_ULP_SOCKETS,
	C_PEERNAME,
	C_SPLICED,
	C_SPLICED_BYTES,
	C_AFTER_MISS,
	C_COUNT,
};

struct {
	__uint(type, BPF_MAP_TYPE_SOCKHASH);
	__uint(max_entries, 65536);
	__type(key, struct pair);
	__type(value, __u32); // aya's SockHash takes u32 values
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} wd_sock_pairs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64); // socket cookie, between connect() and ESTABLISHED
	__type(value, struct origin);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} wd_orig_cookie SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct pair); // the connecting socket's tuple, until it closes
	__type(value, struct origin);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} wd_orig_pair SEC(".maps");

// The same origins for the accepting side's SO_ORIGINAL_DST: the connecting socket's tuple
// with its port zeroed and `pad` holding its initial sequence number + 1 (origin_key). The
// accepting side sees that number however its conntrack rewrote the port.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct pair);
	__type(value, struct origin);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} wd_orig_isn SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32[4]);
	__type(value, struct pod);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} wd_local_pods SEC(".maps");

// What each cgroup's load was given (filled by user space when it attaches): read by
// `warden accel status` only, declared here so it is created and pinned with the others.
struct cgroup_cfg {
	__u32 capture; // 0 iptables, 1 ebpf
	__u32 legs;    // 0 all, 1 sidecars
	__u32 proxy_uid;
	__u16 outbound_port;
	__u16 inbound_port;
	__u32 app_dial_ip4; // host order
	struct out_scope out;
	struct in_scope in;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64); // cgroup id
	__type(value, struct cgroup_cfg);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} wd_cgroups SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct pair); // sockets that took a ULP
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} wd_ulp_tuples SEC(".maps");

// What a socket in the map carries (SK_STORAGE, made when it is inserted).
// A connection's two initial sequence numbers (+1) as one end sees them. The other end of
// the same connection sees them swapped; a socket that merely has the mirrored tuple (NAT
// remapped a port, e.g. conntrack entries iptables REDIRECT left behind) does not.
struct isn {
	__u32 snd;
	__u32 rcv;
};

struct sk_state {
	__u64 sent;  // bytes of this socket's sends since it was inserted, by any path
	__u32 flags; // SK_*
	__u32 pad;
	struct isn isn;        // this socket's connection
	struct pair target;    // SK_DIRECT: the other app's socket
	struct isn target_isn; // ... and its connection, as the far sidecar's end sees it
};

// An app's end of app <-> sidecar: its sends may skip a spliced relay.
#define SK_APP 1
// A send went through TCP (its peer was not in the map yet): a redirected one would reach
// the peer's receive queue first, and the kernel reads that queue before TCP's, so every
// later send goes through TCP too.
#define SK_MISSED 2
// This app's sends go to the other app's socket (see struct splice).
#define SK_DIRECT 4

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct sk_state);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} wd_sk_state SEC(".maps");

// A sidecar relaying a TCP connection byte for byte (user space, warden-accel's splice.rs):
// what arrives on the key's socket leaves on `out`, and `delivered` bytes have been written
// on `out` so far. When both sidecars between two apps relay, an app's send goes straight
// into the other app's socket, provided the far sidecar has delivered every byte that app
// sent before (its `sent`): nothing is left on the old path that the send could overtake.
struct splice {
	struct pair out;
	__u64 delivered;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct pair);
	__type(value, struct splice);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} wd_splice SEC(".maps");

// The sequence numbers of the socket the socket map holds under a tuple: a send is only
// redirected to the socket of its own connection.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct pair);
	__type(value, struct isn);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} wd_isns SEC(".maps");

// Sockets of the map whose sends (some of them) go through TCP: a miss, a ULP, or the socket
// could not be inserted. A relay writing on one cannot be the far end of a splice: its
// bytes would still be in TCP's receive queue when a spliced send reached the app's own.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct pair);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} wd_on_tcp SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, C_COUNT);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} wd_counters SEC(".maps");

static __always_inline void count(__u32 slot, __u64 n)
{
	__u64 *c = bpf_map_lookup_elem(&wd_counters, &slot);
	if (c)
		__sync_fetch_and_add(c, n);
}

static __always_inline __u64 counter(__u32 slot)
{
	__u64 *c = bpf_map_lookup_elem(&wd_counters, &slot);
	return c ? *c : 0;
}

static __always_inline void set_v4(__u32 ip[4], __u32 v4)
{
	ip[0] = 0;
	ip[1] = 0;
	ip[2] = bpf_htonl(0xffff);
	ip[3] = v4;
}

static __always_inline int is_mapped(const __u32 ip[4])
{
	return ip[0] == 0 && ip[1] == 0 && ip[2] == bpf_htonl(0xffff);
}

static __always_inline int is_loopback(const __u32 ip[4])
{
	if (is_mapped(ip))
		return (bpf_ntohl(ip[3]) >> 24) == 127;
	return ip[0] == 0 && ip[1] == 0 && ip[2] == 0 && ip[3] == bpf_htonl(1);
}

static __always_inline int is_ip(const __u32 ip[4], __u32 v4_host)
{
	return is_mapped(ip) && ip[3] == bpf_htonl(v4_host);
}

static __always_inline int loopback_pair(const struct pair *p)
{
	return is_loopback(p->sip) || is_loopback(p->dip);
}

// Both families' address fields are read unconditionally and the family only picks among
// the values: loads under a branch get merged by clang into one load through a computed
// pointer, which the verifier refuses on these pointers.
#define PICK(k_ip, v4, v6_0, v6_1, v6_2, v6_3)                                                 \
	do {                                                                                   \
		if (family == AF_INET) {                                                       \
			set_v4(k_ip, v4);                                                      \
		} else {                                                                       \
			(k_ip)[0] = v6_0;                                                      \
			(k_ip)[1] = v6_1;                                                      \
			(k_ip)[2] = v6_2;                                                      \
			(k_ip)[3] = v6_3;                                                      \
		}                                                                              \
	} while (0)

// The socket's own tuple from a sock_ops context; 0 when it is not IP.
static __always_inline int ops_key(struct bpf_sock_ops *skops, struct pair *k)
{
	__u32 family = LD(skops->family);
	if (family != AF_INET && family != AF_INET6)
		return 0;
	__u32 l4 = LD(skops->local_ip4), r4 = LD(skops->remote_ip4);
	__u32 l0 = LD(skops->local_ip6[0]), l1 = LD(skops->local_ip6[1]);
	__u32 l2 = LD(skops->local_ip6[2]), l3 = LD(skops->local_ip6[3]);
	__u32 r0 = LD(skops->remote_ip6[0]), r1 = LD(skops->remote_ip6[1]);
	__u32 r2 = LD(skops->remote_ip6[2]), r3 = LD(skops->remote_ip6[3]);
	// A 32-bit read: remote_port holds the network-order port in its upper half.
	__u32 remote = LD(skops->remote_port);
	__u32 local = LD(skops->local_port);
	PICK(k->sip, l4, l0, l1, l2, l3);
	PICK(k->dip, r4, r0, r1, r2, r3);
	k->sport = (__u16)local;
	k->dport = (__u16)bpf_ntohl(remote);
	if (loopback_pair(k))
		k->netns = bpf_get_netns_cookie(skops);
	return 1;
}

// The socket's own tuple for a message, and its peer's (local and remote swapped).
static __always_inline int msg_keys(struct sk_msg_md *msg, struct pair *self, struct pair *peer)
{
	__u32 family = LD(msg->family);
	if (family != AF_INET && family != AF_INET6)
		return 0;
	__u32 l4 = LD(msg->local_ip4), r4 = LD(msg->remote_ip4);
	__u32 l0 = LD(msg->local_ip6[0]), l1 = LD(msg->local_ip6[1]);
	__u32 l2 = LD(msg->local_ip6[2]), l3 = LD(msg->local_ip6[3]);
	__u32 r0 = LD(msg->remote_ip6[0]), r1 = LD(msg->remote_ip6[1]);
	__u32 r2 = LD(msg->remote_ip6[2]), r3 = LD(msg->remote_ip6[3]);
	__u32 remote = LD(msg->remote_port);
	__u32 local = LD(msg->local_port);
	PICK(self->sip, l4, l0, l1, l2, l3);
	PICK(self->dip, r4, r0, r1, r2, r3);
	self->sport = (__u16)local;
	self->dport = (__u16)bpf_ntohl(remote);
	if (loopback_pair(self))
		self->netns = bpf_get_netns_cookie(msg);
	peer->netns = self->netns;
	__builtin_memcpy(peer->sip, self->dip, sizeof(peer->sip));
	__builtin_memcpy(peer->dip, self->sip, sizeof(peer->dip));
	peer->sport = self->dport;
	peer->dport = self->sport;
	return 1;
}

// `k` (the connecting socket's own tuple) as wd_orig_isn's key.
static __always_inline void origin_key(struct pair *k, __u32 snd_isn)
{
	k->sport = 0;
	k->pad = snd_isn;
}

static __always_inline void mirror(const struct pair *p, struct pair *m)
{
	m->netns = p->netns;
	__builtin_memcpy(m->sip, p->dip, sizeof(m->sip));
	__builtin_memcpy(m->dip, p->sip, sizeof(m->dip));
	m->sport = p->dport;
	m->dport = p->sport;
	m->pad = 0;
}

// A bpf_sock's tuple (getsockopt/setsockopt); `swap` builds the peer's.
static __always_inline int sock_key(struct bpf_sock *sk, struct pair *k, int swap, __u64 netns)
{
	__u32 family = LD(sk->family);
	if (family != AF_INET && family != AF_INET6)
		return 0;
	__u32 s4 = LD(sk->src_ip4), d4 = LD(sk->dst_ip4);
	__u32 s0 = LD(sk->src_ip6[0]), s1 = LD(sk->src_ip6[1]);
	__u32 s2 = LD(sk->src_ip6[2]), s3 = LD(sk->src_ip6[3]);
	__u32 d0 = LD(sk->dst_ip6[0]), d1 = LD(sk->dst_ip6[1]);
	__u32 d2 = LD(sk->dst_ip6[2]), d3 = LD(sk->dst_ip6[3]);
	__u16 sport = (__u16)LD(sk->src_port);
	__u16 dport = bpf_ntohs((__u16)LD(sk->dst_port));
	__u32 src[4], dst[4];
	PICK(src, s4, s0, s1, s2, s3);
	PICK(dst, d4, d0, d1, d2, d3);
	if (swap) {
		__builtin_memcpy(k->sip, dst, sizeof(dst));
		__builtin_memcpy(k->dip, src, sizeof(src));
		k->sport = dport;
		k->dport = sport;
	} else {
		__builtin_memcpy(k->sip, src, sizeof(src));
		__builtin_memcpy(k->dip, dst, sizeof(dst));
		k->sport = sport;
		k->dport = dport;
	}
	if (loopback_pair(k))
		k->netns = netns;
	return 1;
}

SEC("sockops")
int wd_sockops(struct bpf_sock_ops *skops)
{
	__u32 op = skops->op;
	struct pair key = {};

	if (op == BPF_SOCK_OPS_STATE_CB) {
		// Forget what was kept for this connection, so a later one with the same tuple
		// gets no stale answer.
		if (skops->args[1] == BPF_TCP_CLOSE && ops_key(skops, &key)) {
			bpf_map_delete_elem(&wd_orig_pair, &key);
			// snd_una and bytes_acked move together: their difference is the ISN + 1.
			struct pair okey = key;
			origin_key(&okey, skops->snd_una - (__u32)skops->bytes_acked);
			bpf_map_delete_elem(&wd_orig_isn, &okey);
			bpf_map_delete_elem(&wd_ulp_tuples, &key);
			// A relay's socket that closes (also when its sidecar was killed) ends the
			// splice through it.
			bpf_map_delete_elem(&wd_splice, &key);
			bpf_map_delete_elem(&wd_on_tcp, &key);
			bpf_map_delete_elem(&wd_isns, &key);
		}
		return 1;
	}
	if (op != BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB && op != BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB)
		return 1;
	if (!ops_key(skops, &key))
		return 1;

	int insert = 0, app = 0;
	if (op == BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB) {
		// A connect() that connect4/6 rewrote: keep its original destination under the
		// tuple the accepting sidecar will see mirrored.
		__u64 cookie = bpf_get_socket_cookie(skops);
		struct origin *o = bpf_map_lookup_elem(&wd_orig_cookie, &cookie);
		if (o) {
			struct origin copy = *o;
			bpf_map_update_elem(&wd_orig_pair, &key, &copy, BPF_ANY);
			struct pair okey = key;
			origin_key(&okey, skops->snd_nxt); // nothing sent yet: ISN + 1
			bpf_map_update_elem(&wd_orig_isn, &okey, &copy, BPF_ANY);
			bpf_map_delete_elem(&wd_orig_cookie, &cookie);
			// The close callback forgets both, also for sockets never inserted.
			bpf_sock_ops_cb_flags_set(skops, skops->bpf_sock_ops_cb_flags |
								 BPF_SOCK_OPS_STATE_CB_FLAG);
			// sidecar -> sidecar, or app -> sidecar
			insert = (copy.flags & ORIGIN_SIDECAR) || app_legs;
			app = !(copy.flags & ORIGIN_SIDECAR);
		} else if (is_ip(key.sip, PASSTHROUGH_SRC)) {
			insert = app_legs; // sidecar -> app
		}
	} else {
		if (key.sport == inbound_port && !is_ip(key.dip, PASSTHROUGH_SRC))
			insert = 1; // the accepting sidecar's side of sidecar -> sidecar
		else if (key.sport == outbound_port)
			insert = app_legs; // the sidecar's side of app -> sidecar
		else if (is_ip(key.dip, PASSTHROUGH_SRC))
			insert = app = app_legs; // the app's side of sidecar -> app
	}
	if (!insert)
		return 1;
	// Before the socket is in the map: its first send must find its state. Nothing was
	// sent yet, so the next sequence numbers are the initial ones + 1.
	struct isn isn = {.snd = skops->snd_nxt, .rcv = skops->rcv_nxt};
	struct bpf_sock *sk = skops->sk;
	if (sk) {
		struct sk_state *st =
			bpf_sk_storage_get(&wd_sk_state, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
		if (st) {
			st->sent = 0;
			st->flags = app ? SK_APP : 0;
			st->isn = isn;
		}
	}
	if (bpf_map_update_elem(&wd_isns, &key, &isn, BPF_ANY) != 0)
		return 1; // unverifiable: never redirected to, and its own sends miss
	// Sockets that already have a ULP (kTLS) are refused by the kernel (-EINVAL) and
	// counted as failures; they keep working over TCP.
	if (bpf_sock_hash_update(skops, &wd_sock_pairs, &key, BPF_NOEXIST) == 0) {
		count(C_INSERTED, 1);
	} else {
		// Whatever the map holds under this tuple is not this connection's socket.
		bpf_map_delete_elem(&wd_isns, &key);
		__u32 one = 1;
		bpf_map_update_elem(&wd_on_tcp, &key, &one, BPF_ANY);
		count(C_INSERT_FAILED, 1);
	}
	bpf_sock_ops_cb_flags_set(skops, skops->bpf_sock_ops_cb_flags | BPF_SOCK_OPS_STATE_CB_FLAG);
	return 1;
}

// Whether the map's socket under `key` is the far end of the connection whose end sees `isn`.
static __always_inline int same_connection(const struct pair *key, const struct isn *isn)
{
	struct isn *theirs = bpf_map_lookup_elem(&wd_isns, key);
	return theirs && theirs->snd == isn->rcv && theirs->rcv == isn->snd;
}

// The other app's socket when both sidecars between this app and it splice the connection
// and the far one has delivered, through sk_msg, all `before` bytes this app sent until now;
// then, and from then on while both splices stand, sends go there.
static __always_inline int spliced(struct sk_state *st, const struct pair *peer, __u64 before)
{
	struct pair far_in = {};
	struct splice *far = 0;
	struct splice *near = bpf_map_lookup_elem(&wd_splice, peer);
	if (near) {
		mirror(&near->out, &far_in);
		far = bpf_map_lookup_elem(&wd_splice, &far_in);
	}
	if (!far) {
		st->flags &= ~SK_DIRECT;
		return 0;
	}
	if (st->flags & SK_DIRECT)
		return 1;
	// Each hop must be one connection, not just a mirrored tuple (NAT can remap a port):
	// this app's peer, the near sidecar's upstream and the far sidecar's downstream.
	struct isn *link = bpf_map_lookup_elem(&wd_isns, &near->out);
	if (!same_connection(peer, &st->isn) || !link || !same_connection(&far_in, link))
		return 0;
	if (LD(far->delivered) != before || bpf_map_lookup_elem(&wd_on_tcp, &far->out))
		return 0;
	struct isn *relay = bpf_map_lookup_elem(&wd_isns, &far->out);
	if (!relay)
		return 0;
	mirror(&far->out, &st->target);
	st->target_isn = *relay;
	st->flags |= SK_DIRECT;
	return 1;
}

// This socket's sends go through TCP from now on (see SK_MISSED).
static __always_inline void stay_on_tcp(struct sk_state *st, const struct pair *self)
{
	if (!st)
		return;
	st->flags |= SK_MISSED;
	__u32 one = 1;
	bpf_map_update_elem(&wd_on_tcp, self, &one, BPF_ANY);
}

SEC("sk_msg")
int wd_sk_msg(struct sk_msg_md *msg)
{
	struct pair self = {}, peer = {};
	if (!msg_keys(msg, &self, &peer))
		return SK_PASS;
	struct sk_state *st = 0;
	struct bpf_sock *sk = msg->sk;
	if (sk)
		st = bpf_sk_storage_get(&wd_sk_state, sk, 0, 0);
	// Only look for ULP marks once a socket has ever taken one.
	if (counter(C_ULP_SOCKETS) != 0 &&
	    (bpf_map_lookup_elem(&wd_ulp_tuples, &self) || bpf_map_lookup_elem(&wd_ulp_tuples, &peer))) {
		count(C_ULP_PASSED, 1);
		stay_on_tcp(st, &self);
		return SK_PASS;
	}
	__u32 size = msg->size;
	if (st) {
		if (st->flags & SK_MISSED) {
			count(C_AFTER_MISS, 1);
			return SK_PASS;
		}
		// Sends of one socket are serialized by its lock: a plain update.
		__u64 before = st->sent;
		st->sent = before + size;
		if ((st->flags & SK_APP) && spliced(st, &peer, before)) {
			if (same_connection(&st->target, &st->target_isn) &&
			    bpf_msg_redirect_hash(msg, &wd_sock_pairs, &st->target, BPF_F_INGRESS) ==
				    SK_PASS) {
				count(C_SPLICED, 1);
				count(C_SPLICED_BYTES, size);
				return SK_PASS;
			}
			// The other app's socket closed: nothing of this connection reaches it now.
			stay_on_tcp(st, &self);
			count(C_REDIRECT_MISSES, 1);
			return SK_PASS;
		}
	}
	// bpf_msg_redirect_hash says SK_DROP when the peer is not in the map: never return
	// that, the message then goes through TCP as if nothing was attached. A socket under
	// the mirrored tuple that is not this connection's other end is a miss too.
	if (st && same_connection(&peer, &st->isn) &&
	    bpf_msg_redirect_hash(msg, &wd_sock_pairs, &peer, BPF_F_INGRESS) == SK_PASS) {
		count(C_REDIRECTED, 1);
		count(C_REDIRECTED_BYTES, size);
	} else {
		stay_on_tcp(st, &self);
		count(C_REDIRECT_MISSES, 1);
	}
	return SK_PASS;
}

static __always_inline int has_port(const volatile __u16 *ports, __u32 n, __u16 port)
{
	for (int i = 0; i < PORTS_MAX; i++) {
		if (i >= n)
			break;
		if (ports[i] == port)
			return 1;
	}
	return 0;
}

static __always_inline int in_cidrs(const volatile struct cidr *cidrs, __u32 n, const __u32 ip[4])
{
	for (int i = 0; i < CIDRS_MAX; i++) {
		if (i >= n)
			break;
		const volatile struct cidr *c = &cidrs[i];
		if ((ip[0] & c->mask[0]) == c->ip[0] && (ip[1] & c->mask[1]) == c->ip[1] &&
		    (ip[2] & c->mask[2]) == c->ip[2] && (ip[3] & c->mask[3]) == c->ip[3])
			return 1;
	}
	return 0;
}

// Whether the pod's call to dst:dport goes to its sidecar (ISTIO_OUTPUT's selections).
static __always_inline int outbound_captured(const __u32 dst[4], __u16 dport)
{
	if (has_port(out_scope.ports, out_scope.n_ports, dport))
		return 0;
	if (in_cidrs(out_scope.excluded, out_scope.n_excluded, dst))
		return 0;
	return out_scope.included_all || in_cidrs(out_scope.included, out_scope.n_included, dst);
}

// Whether `pod`'s sidecar serves its port (ISTIO_INBOUND's selections).
static __always_inline int inbound_captured(const struct pod *pod, __u16 port)
{
	if (has_port(pod->in.excluded, pod->in.n_excluded, port))
		return 0;
	return pod->in.all_ports || has_port(pod->in.ports, pod->in.n_ports, port);
}

static __always_inline void remember(void *ctx, const __u32 ip[4], __u16 port, __u16 family,
				     __u32 flags)
{
	__u64 cookie = bpf_get_socket_cookie(ctx);
	struct origin o = {};
	__builtin_memcpy(o.ip, ip, sizeof(o.ip));
	o.port = port;
	o.family = family;
	o.flags = flags;
	bpf_map_update_elem(&wd_orig_cookie, &cookie, &o, BPF_ANY);
}

// What connect4 and connect6 share: 1 to rewrite the destination to `*port` (and, for an
// app, `*to_own`: its own sidecar at app_dial_ip4), with the original kept under the
// socket's cookie.
static __always_inline int capture(void *ctx, struct bpf_sock *sk, const __u32 dst[4], __u16 dport,
				   __u16 family, __u32 *to_port, int *to_own)
{
	__u32 uid = (__u32)bpf_get_current_uid_gid();
	if (uid == proxy_uid) {
		// The sidecar's own calls go where it sends them, except to a meshed pod of this
		// node: straight to that pod's inbound listener, which keeps the 4-tuple mirrored.
		if (sk) {
			__u32 sk_family = LD(sk->family);
			if (sk_family == AF_INET && LD(sk->src_ip4) == bpf_htonl(PASSTHROUGH_SRC))
				return 0;
		}
		struct pod *pod = bpf_map_lookup_elem(&wd_local_pods, dst);
		if (!pod || dport == pod->inbound_port || !inbound_captured(pod, dport))
			return 0;
		remember(ctx, dst, dport, family, ORIGIN_SIDECAR);
		*to_port = pod->inbound_port;
		*to_own = 0;
		count(C_CAPTURE_INBOUND, 1);
		return 1;
	}
	if (is_loopback(dst))
		return 0; // Istio's `-d 127.0.0.1/32 -j RETURN` and `-o lo` rules
	if (!outbound_captured(dst, dport))
		return 0;
	remember(ctx, dst, dport, family, 0);
	*to_port = outbound_port;
	*to_own = 1;
	count(C_CAPTURE_OUTBOUND, 1);
	return 1;
}

SEC("cgroup/connect4")
int wd_connect4(struct bpf_sock_addr *ctx)
{
	if (ctx->type != SOCK_STREAM)
		return 1;
	__u32 dst[4];
	set_v4(dst, ctx->user_ip4);
	__u16 dport = bpf_ntohs((__u16)ctx->user_port);
	__u32 port = 0;
	int own = 0;
	if (!capture(ctx, ctx->sk, dst, dport, AF_INET, &port, &own))
		return 1;
	if (own)
		ctx->user_ip4 = bpf_htonl(app_dial_ip4);
	ctx->user_port = bpf_htons((__u16)port);
	return 1;
}

// IPv4 reached through a dual-stack socket (::ffff:a.b.c.d) only: the sidecar listens on
// IPv4, so native IPv6 destinations are left alone (as `warden capture` without --ipv6).
SEC("cgroup/connect6")
int wd_connect6(struct bpf_sock_addr *ctx)
{
	if (ctx->type != SOCK_STREAM)
		return 1;
	__u32 dst[4];
	dst[0] = ctx->user_ip6[0];
	dst[1] = ctx->user_ip6[1];
	dst[2] = ctx->user_ip6[2];
	dst[3] = ctx->user_ip6[3];
	if (!is_mapped(dst))
		return 1;
	__u16 dport = bpf_ntohs((__u16)ctx->user_port);
	__u32 port = 0;
	int own = 0;
	if (!capture(ctx, 0, dst, dport, AF_INET, &port, &own))
		return 1;
	if (own)
		ctx->user_ip6[3] = bpf_htonl(app_dial_ip4);
	ctx->user_port = bpf_htons((__u16)port);
	return 1;
}

// The origin of the connection a connected socket of this cgroup made, if connect4/6
// rewrote it. The sidecar's own calls see the truth: it keys its relays by real tuples.
static __always_inline struct origin *origin_of(void *ctx, struct bpf_sock *sk)
{
	if ((__u32)bpf_get_current_uid_gid() == proxy_uid)
		return 0;
	struct pair key = {};
	if (!sk || !sock_key(sk, &key, 0, bpf_get_netns_cookie(ctx)))
		return 0;
	return bpf_map_lookup_elem(&wd_orig_pair, &key);
}

SEC("cgroup/getpeername4")
int wd_getpeername4(struct bpf_sock_addr *ctx)
{
	struct origin *o = origin_of(ctx, ctx->sk);
	if (!o)
		return 1;
	ctx->user_ip4 = o->ip[3];
	ctx->user_port = bpf_htons(o->port);
	count(C_PEERNAME, 1);
	return 1;
}

// A dual-stack socket's peer, ::ffff:a.b.c.d (connect6 captures only those).
SEC("cgroup/getpeername6")
int wd_getpeername6(struct bpf_sock_addr *ctx)
{
	struct origin *o = origin_of(ctx, ctx->sk);
	if (!o)
		return 1;
	ctx->user_ip6[0] = o->ip[0];
	ctx->user_ip6[1] = o->ip[1];
	ctx->user_ip6[2] = o->ip[2];
	ctx->user_ip6[3] = o->ip[3];
	ctx->user_port = bpf_htons(o->port);
	count(C_PEERNAME, 1);
	return 1;
}

// Large option buffers: tell the kernel to use the caller's own (we never edit those).
static __always_inline void untouched(struct bpf_sockopt *ctx)
{
	if (ctx->optlen > 4096)
		ctx->optlen = 0;
}

SEC("cgroup/getsockopt")
int wd_getsockopt(struct bpf_sockopt *ctx)
{
	__s32 level = ctx->level;
	if (ctx->optname != SO_ORIGINAL_DST || (level != SOL_IP && level != SOL_IPV6)) {
		untouched(ctx);
		return 1;
	}
	struct bpf_sock *sk = ctx->sk;
	if (!sk)
		return 1;
	// The accepting side asks; the origin is kept under the connecting socket's tuple and
	// ISN, which is this socket's first received sequence number (rcv_nxt and
	// bytes_received move together).
	struct pair key = {};
	if (!sock_key(sk, &key, 1, bpf_get_netns_cookie(ctx)))
		return 1;
	struct bpf_tcp_sock *tp = bpf_tcp_sock(sk);
	if (!tp)
		return 1;
	origin_key(&key, tp->rcv_nxt - (__u32)tp->bytes_received);
	struct origin *o = bpf_map_lookup_elem(&wd_orig_isn, &key);
	if (!o)
		return 1; // not ours: whatever the kernel (conntrack) answered stands

	void *end = ctx->optval_end;
	if (level == SOL_IP) {
		struct {
			__u16 family;
			__u16 port;
			__u32 addr;
			__u8 zero[8];
		} *sin = ctx->optval;
		if ((void *)(sin + 1) > end)
			return 1;
		sin->family = AF_INET;
		sin->port = bpf_htons(o->port);
		sin->addr = o->ip[3];
		__builtin_memset(sin->zero, 0, sizeof(sin->zero));
		// Two separate 4-byte stores: clang merges adjacent ones into an 8-byte store the
		// verifier refuses on this context (off=32 size=8).
		*(volatile __s32 *)&ctx->optlen = sizeof(*sin);
	} else {
		struct {
			__u16 family;
			__u16 port;
			__u32 flowinfo;
			__u32 addr[4];
			__u32 scope;
		} *sin6 = ctx->optval;
		if ((void *)(sin6 + 1) > end)
			return 1;
		sin6->family = AF_INET6;
		sin6->port = bpf_htons(o->port);
		sin6->flowinfo = 0;
		sin6->addr[0] = o->ip[0];
		sin6->addr[1] = o->ip[1];
		sin6->addr[2] = o->ip[2];
		sin6->addr[3] = o->ip[3];
		sin6->scope = 0;
		*(volatile __s32 *)&ctx->optlen = sizeof(*sin6);
	}
	*(volatile __s32 *)&ctx->retval = 0;
	count(C_ORIGINAL_DST, 1);
	return 1;
}

// Runs before the kernel's handler, so it sees TCP_ULP even where the kernel then refuses
// it (no tls module): from here on, neither this socket nor its peer redirect.
SEC("cgroup/setsockopt")
int wd_setsockopt(struct bpf_sockopt *ctx)
{
	if (ctx->level == SOL_TCP && ctx->optname == TCP_ULP) {
		struct bpf_sock *sk = ctx->sk;
		struct pair key = {};
		if (sk && sock_key(sk, &key, 0, bpf_get_netns_cookie(ctx))) {
			__u32 one = 1;
			bpf_map_update_elem(&wd_ulp_tuples, &key, &one, BPF_ANY);
			count(C_ULP_SOCKETS, 1);
		}
	}
	untouched(ctx);
	return 1;
}

char LICENSE[] SEC("license") = "GPL";
