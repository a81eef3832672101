# cellular-trace on the fallback backend, run 0000, state at 0 s: the namespaces and veths exist (harness/net/topology.py)
ip netns exec wh0000-rt iptables -t mangle -A FORWARD -i p1 -j NFQUEUE --queue-num 2 --queue-bypass
ip netns exec wh0000-w1 iptables -t filter -A INPUT -i eth0 -j NFQUEUE --queue-num 3 --queue-bypass
ip -n wh0000-learner link set dev eth0 gso_max_segs 64
tc -n wh0000-learner qdisc replace dev eth0 root handle 1: htb default 1
tc -n wh0000-learner class replace dev eth0 parent 1: classid 1:1 htb rate 1000000000bit burst 250000b cburst 250000b quantum 60000
tc -n wh0000-learner qdisc replace dev eth0 parent 1:1 handle 10: pfifo limit 1000
ip -n wh0000-rt link set dev p0 gso_max_segs 64
tc -n wh0000-rt qdisc replace dev p0 root handle 1: htb default 1
tc -n wh0000-rt class replace dev p0 parent 1: classid 1:1 htb rate 1000000000bit burst 250000b cburst 250000b quantum 60000
tc -n wh0000-rt qdisc replace dev p0 parent 1:1 handle 10: pfifo limit 1000
ip -n wh0000-w1 link set dev eth0 gso_max_segs 2
tc -n wh0000-w1 qdisc replace dev eth0 root handle 1: htb default 1
tc -n wh0000-w1 class replace dev eth0 parent 1: classid 1:1 htb rate 33822600bit burst 8455b cburst 8455b quantum 60000
tc -n wh0000-w1 qdisc replace dev eth0 parent 1:1 handle 10: pfifo limit 1000
ip -n wh0000-rt link set dev p1 gso_max_segs 2
tc -n wh0000-rt qdisc replace dev p1 root handle 1: htb default 1
tc -n wh0000-rt class replace dev p1 parent 1: classid 1:1 htb rate 33822600bit burst 8455b cburst 8455b quantum 60000
tc -n wh0000-rt qdisc replace dev p1 parent 1:1 handle 10: pfifo limit 1000
# w1 up: delay line on NFQUEUE 2 in wh0000-rt: delay 20000us jitter 0us, kernel queue 1000 packets (python -m harness.net.delayline, run in wh0000-rt)
# w1 down: delay line on NFQUEUE 3 in wh0000-w1: delay 20000us jitter 0us, kernel queue 1000 packets (python -m harness.net.delayline, run in wh0000-rt)
# w1 up: trace cellular-lte.csv, every 1 s the shaper replaces class 1:1's rate (and the delay, the loss) in place: 120 steps per 120 s loop
# w1 down: trace cellular-lte.csv, every 1 s the shaper replaces class 1:1's rate (and the delay, the loss) in place: 120 steps per 120 s loop
