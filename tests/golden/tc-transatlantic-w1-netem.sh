# transatlantic on the netem backend, run 0000, state at 0 s: the namespaces and veths exist (harness/net/topology.py)
ip -n wh0000-learner link set dev eth0 gso_max_segs 64
tc -n wh0000-learner qdisc replace dev eth0 root handle 1: htb default 1
tc -n wh0000-learner class replace dev eth0 parent 1: classid 1:1 htb rate 1000000000bit burst 250000b cburst 250000b quantum 60000
tc -n wh0000-learner qdisc replace dev eth0 parent 1:1 handle 10: netem limit 1000 delay 500us
ip -n wh0000-rt link set dev p0 gso_max_segs 64
tc -n wh0000-rt qdisc replace dev p0 root handle 1: htb default 1
tc -n wh0000-rt class replace dev p0 parent 1: classid 1:1 htb rate 1000000000bit burst 250000b cburst 250000b quantum 60000
tc -n wh0000-rt qdisc replace dev p0 parent 1:1 handle 10: netem limit 1000 delay 500us
ip -n wh0000-w1 link set dev eth0 gso_max_segs 8
tc -n wh0000-w1 qdisc replace dev eth0 root handle 1: htb default 1
tc -n wh0000-w1 class replace dev eth0 parent 1: classid 1:1 htb rate 100000000bit burst 25000b cburst 25000b quantum 60000
tc -n wh0000-w1 qdisc replace dev eth0 parent 1:1 handle 10: netem limit 1000 delay 35000us 1000us loss 0.01%
ip -n wh0000-rt link set dev p1 gso_max_segs 8
tc -n wh0000-rt qdisc replace dev p1 root handle 1: htb default 1
tc -n wh0000-rt class replace dev p1 parent 1: classid 1:1 htb rate 100000000bit burst 25000b cburst 25000b quantum 60000
tc -n wh0000-rt qdisc replace dev p1 parent 1:1 handle 10: netem limit 1000 delay 35000us 1000us loss 0.01%
