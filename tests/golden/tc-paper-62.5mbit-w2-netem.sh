# paper-62.5mbit on the netem backend, run 0000, state at 0 s: the namespaces and veths exist (harness/net/topology.py)
ip -n wh0000-w1 link set dev eth0 gso_max_segs 5
tc -n wh0000-w1 qdisc replace dev eth0 root handle 1: htb default 1
tc -n wh0000-w1 class replace dev eth0 parent 1: classid 1:1 htb rate 62500000bit burst 15625b cburst 15625b quantum 60000
tc -n wh0000-w1 qdisc replace dev eth0 parent 1:1 handle 10: pfifo limit 1000
ip -n wh0000-rt link set dev p1 gso_max_segs 5
tc -n wh0000-rt qdisc replace dev p1 root handle 1: htb default 1
tc -n wh0000-rt class replace dev p1 parent 1: classid 1:1 htb rate 62500000bit burst 15625b cburst 15625b quantum 60000
tc -n wh0000-rt qdisc replace dev p1 parent 1:1 handle 10: pfifo limit 1000
ip -n wh0000-w2 link set dev eth0 gso_max_segs 5
tc -n wh0000-w2 qdisc replace dev eth0 root handle 1: htb default 1
tc -n wh0000-w2 class replace dev eth0 parent 1: classid 1:1 htb rate 62500000bit burst 15625b cburst 15625b quantum 60000
tc -n wh0000-w2 qdisc replace dev eth0 parent 1:1 handle 10: pfifo limit 1000
ip -n wh0000-rt link set dev p2 gso_max_segs 5
tc -n wh0000-rt qdisc replace dev p2 root handle 1: htb default 1
tc -n wh0000-rt class replace dev p2 parent 1: classid 1:1 htb rate 62500000bit burst 15625b cburst 15625b quantum 60000
tc -n wh0000-rt qdisc replace dev p2 parent 1:1 handle 10: pfifo limit 1000
