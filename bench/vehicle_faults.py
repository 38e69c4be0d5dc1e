# ruff: noqa: E501  (long sentences of data, kept whole)
"""Hand-written data of the vehicle-domain retrieval set (bench/vehicle_retrieval.py). Written for this project.

For each fault of the product's knowledge pack (vdoctor/knowledge/dtc_pack.json), ALERTS are alert texts
the way a vehicle or a call centre reports them (what a stored case's alert_text holds), and QUERIES are
symptom descriptions in other words, Chinese and English, WITHOUT trouble codes, as a later session would
describe the problem. A query should find the verified cases of the same fault in its series.

One writer wrote both the alert texts and the queries: shared Chinese characters reflect one person's
vocabulary. Use the set for relative comparisons (embedders, channels, what a case is indexed by); extend it
with real field phrasing before relying on absolute figures.
"""

# code -> (alert texts as reported, symptom queries paraphrased without codes)
FAULTS: dict[str, tuple[list[str], list[str]]] = {
    "P0A7F": (
        ["电池包单体压差过大", "BMS报单体电压一致性差", "Cell voltage spread high"],
        ["充满电后续航掉得很快，后台看到有几串电芯电压明显比别的低",
         "电芯之间电压差越来越大，均衡也拉不回来",
         "a few battery cells sit far below the rest after charging and the range keeps shrinking"],
    ),
    "P0A80": (
        ["动力电池容量衰减严重", "电池健康度低，建议更换电池包", "HV battery capacity faded"],
        ["车开了几年，满电只能跑原来一半的里程，电池老化得厉害",
         "电池健康状态掉到七成以下了，充满也跑不远",
         "the traction battery has aged badly, a full charge now gives about half the original range"],
    ),
    "P0AFA": (
        ["动力电池总电压过低", "长期停放后高压电池亏电", "HV pack voltage low"],
        ["车在停车场放了两个月没开，再上电时高压电量几乎没了，总压很低",
         "长时间没充电，整包电压掉得太低，车上不了高压",
         "car sat unused for weeks and now the high-voltage pack is almost flat and will not go ready"],
    ),
    "P0A94": (
        ["DC/DC变换器输出电压低", "低压蓄电池不充电，DCDC输出异常", "DCDC output undervoltage"],
        ["开着车小电瓶电压一直往下掉，好像高压没有给低压充电",
         "行驶中仪表提示低压供电不足，12伏电瓶没在充电",
         "while driving the 12 volt battery keeps draining, the converter from the high-voltage side is not topping it up"],
    ),
    "P0AA6": (
        ["高压绝缘电阻过低", "整车绝缘故障报警", "HV isolation resistance low"],
        ["下大雨或者洗车之后车就报漏电，上不了高压",
         "涉水以后高压系统对车身漏电，绝缘检测不过",
         "after heavy rain or a car wash the high-voltage system reports leakage to the body and will not start"],
    ),
    "P0A9C": (
        ["电池温度传感器A读数异常", "电池包温度采样不一致", "Battery temp sensor A implausible"],
        ["电池包里有一个测温点和旁边差了十几度，实际不热",
         "静置一晚上各个模组温度应该一样，有一路温度显示特别离谱",
         "one of the pack temperature readings is way off from its neighbours even when the car has been parked overnight"],
    ),
    "P0AC0": (
        ["电池电流传感器零漂", "电池包电流采样异常", "Pack current sensor offset"],
        ["车停着没用电，电池电流却显示有好几安，电量百分比乱跳",
         "剩余电量一会儿高一会儿低，断开继电器后电流读数也不是零",
         "the state of charge jumps around and the pack current shows several amps even with everything off"],
    ),
    "P0A1F": (
        ["电池管理系统故障", "BMS自检失败反复重启", "Battery energy control module fault"],
        ["电池管理控制器自己反复重启，仪表上电池故障灯时亮时灭",
         "刷完程序后电池管理系统还是自检不过",
         "the battery management controller keeps rebooting by itself and the battery warning light flickers"],
    ),
    "P0C73": (
        ["电机控制器冷却水泵故障", "电驱冷却泵控制异常，控制器过温", "Motor electronics coolant pump A fault"],
        ["爬长坡时电机控制器温度飙高，动力被限制，感觉冷却液没在循环",
         "电驱那一路的水泵不转，逆变器很快就过热",
         "on long climbs the inverter overheats and power is cut, as if the coolant in the drive loop is not flowing"],
    ),
    "P0D27": (
        ["车载充电机输入电压过低", "交流充电中断，OBC输入欠压", "Charger input voltage too low"],
        ["用家里的插座慢充总是充一会儿就断，充电口附近有点发烫",
         "接了很长的拖线板慢充，充电功率很低还老跳",
         "slow charging at home keeps stopping after a few minutes and the charge port feels warm"],
    ),
    "P0A0D": (
        ["高压互锁回路断开", "高压互锁故障，无法上高压", "HVIL circuit open"],
        ["维修完电池回装后车上不了电，提示高压连接没插好",
         "刚拆过高压插头，装回去后一直报互锁，整车无法启动",
         "after a repair the car will not power up the high-voltage side, it says a high-voltage plug is not seated"],
    ),
    "P0AA1": (
        ["主正接触器粘连", "高压继电器断不开", "Positive contactor stuck closed"],
        ["熄火以后高压母线上的电压还一直在，继电器好像没断开",
         "下电后电压不降，怀疑继电器触点焊死了",
         "after switching off the high-voltage bus stays live, the main relay seems to be welded shut"],
    ),
    "P0B24": (
        ["动力电池A电压不稳定", "电池总压跳变", "Battery A voltage unstable"],
        ["行驶中电池总电压上下乱跳，加速时忽高忽低",
         "电池包电压读数来回波动，拆开看有个铜排发黑",
         "the pack voltage reading jumps up and down while driving, worse on hard acceleration"],
    ),
    "P0CA6": (
        ["电池冷却液温度传感器故障", "电池水温采样异常", "Battery coolant temp sensor range"],
        ["电池那路冷却液温度和电芯温度对不上，停了一夜还差十几度",
         "电池水温读数明显不合理，冷车时比环境温度高很多",
         "the battery coolant temperature disagrees with the cell temperatures even after a cold soak"],
    ),
    "P0A7E": (
        ["动力电池包温度过高", "电池过温，快充限功率", "HV battery over temperature"],
        ["夏天快充的时候电池很快就烫了，充电功率被降得很低",
         "高速跑完电池温度到五十多度，冷却好像不起作用",
         "on hot days the battery gets very hot during fast charging and the charging power drops a lot"],
    ),
    "P0A2F": (
        ["驱动电机温度过高", "电机过温，动力受限", "Drive motor A over temperature"],
        ["拉着重物跑山路，电机温度太高，车突然没劲了",
         "长时间大负荷后驱动电机很烫，仪表提示功率受限",
         "towing up a mountain road the motor gets too hot and the car suddenly loses power"],
    ),
    "P0A3F": (
        ["驱动电机位置传感器故障", "旋变信号异常", "Motor position sensor circuit"],
        ["起步的时候车一抖一抖的，电机转速信号对不上",
         "电机转子位置信号时有时无，车辆偶尔突然断动力",
         "the car judders when pulling away and sometimes cuts drive, the motor angle signal looks noisy"],
    ),
    "P0A78": (
        ["驱动电机逆变器性能故障", "电机控制器三相电流不平衡", "Inverter performance fault"],
        ["加速时有异响还抖动，三相电流有一相明显偏小",
         "电机控制器报功率模块异常，跑着跑着就限扭",
         "during acceleration there is a buzz and shudder and one of the motor phase currents is much lower"],
    ),
    "U0111": (
        ["与BMS通讯丢失", "电池管理系统掉线", "Lost communication with BECM"],
        ["仪表上突然没有电池信息了，其它控制器都收不到电池管理的报文",
         "洗车后电池管理失联，整车报通讯故障",
         "the battery controller drops off the network, other modules stop seeing its messages after washing the car"],
    ),
    "P0300": (
        ["发动机多缸失火", "随机失火，发动机抖动", "Random misfire detected"],
        ["怠速的时候发动机抖得厉害，故障灯闪，好几个缸都不太工作",
         "加了一箱便宜油以后发动机开始抖，加速无力",
         "the engine shakes badly at idle and the check-engine light flashes, several cylinders seem to cut out"],
    ),
    "P0301": (
        ["1缸失火", "第一缸点火异常", "Cylinder 1 misfire"],
        ["冷车启动后有一个缸不干活，换过火花塞还是抖",
         "发动机偶尔突突，查下来总是第一个缸的问题",
         "one cylinder, the first one, keeps dropping out on cold starts even after new spark plugs"],
    ),
    "P0171": (
        ["混合气过稀", "燃油修正超限（偏稀）", "System too lean bank 1"],
        ["油耗没变但是怠速不稳，长期燃油修正加到很大，怀疑进气漏气",
         "发动机喷油一直往多了补还是偏稀",
         "the engine runs lean, long term fuel trims are maxed out and the idle is rough, maybe a vacuum leak"],
    ),
    "P0087": (
        ["燃油轨压力过低", "高压油泵供油不足", "Fuel rail pressure too low"],
        ["大脚油门的时候发动机喘不上气，像是供油跟不上",
         "急加速时车往前一冲一冲的，油压上不去",
         "under hard acceleration the engine starves and stumbles as if the fuel pressure cannot keep up"],
    ),
    "P0420": (
        ["三元催化效率低", "催化器转化效率低于阈值", "Catalyst efficiency below threshold"],
        ["年检尾气不过，排气有臭鸡蛋味，车已经跑了十几万公里",
         "后氧传感器信号跟前氧一样在跳，尾气超标",
         "the car failed the emissions test, the exhaust smells of rotten eggs and it has very high mileage"],
    ),
    "P0442": (
        ["蒸发系统小泄漏", "燃油蒸气泄漏", "EVAP small leak detected"],
        ["加完油以后故障灯亮了，车旁边能闻到一点汽油味",
         "油箱盖好像没拧紧，仪表报排放系统故障",
         "the engine light came on after filling up and there is a faint smell of fuel near the car"],
    ),
    "P0128": (
        ["节温器故障，水温偏低", "冷却液温度达不到正常值", "Coolant thermostat below regulating temperature"],
        ["冬天开了半小时水温表还在很低的位置，暖风一直不热",
         "发动机总是热不起来，油耗也变高了",
         "in winter the temperature gauge stays low even after half an hour and the heater blows cold"],
    ),
    "P0118": (
        ["冷却液温度传感器电路高", "水温信号异常（显示极低）", "ECT sensor circuit high"],
        ["刚跑完高速水温却显示零下四十度，风扇一直狂转",
         "水温读数不合理，热车了还显示特别冷",
         "right after a motorway drive the coolant temperature reads minus forty and the fan runs flat out"],
    ),
    "P0217": (
        ["发动机冷却液温度过高", "发动机过热报警", "Engine coolant over temperature"],
        ["堵车的时候水温表一直往上冲到红线，机盖冒白汽",
         "夏天爬坡发动机开锅了，副水壶里冷却液很少",
         "stuck in traffic the temperature gauge climbed into the red and steam came from under the bonnet"],
    ),
    "P0299": (
        ["涡轮增压不足", "增压压力低于目标值", "Turbo underboost"],
        ["超车的时候没劲，涡轮好像不增压了，能听到漏气的嘶嘶声",
         "加油门提速很慢，增压压力一直达不到",
         "the car feels flat when overtaking, the turbo does not build pressure and there is a hissing noise"],
    ),
    "P0335": (
        ["曲轴位置传感器电路故障", "曲轴信号丢失", "Crankshaft position sensor A circuit"],
        ["开着开着发动机突然熄火，之后要打好几次才能着",
         "热车后偶发熄火，转速表指针直接掉到零",
         "the engine cuts out while driving and then takes several attempts to restart, the rev counter drops to zero"],
    ),
    "P0101": (
        ["空气流量传感器性能异常", "进气量信号不合理", "MAF sensor range/performance"],
        ["换了空滤以后车加速发闷，进气量数据和理论值差很多",
         "进气管有裂缝，发动机进气测量不准",
         "after changing the air filter acceleration is sluggish and the measured airflow is far from expected"],
    ),
    "P0507": (
        ["怠速转速过高", "怠速控制异常（转速偏高）", "Idle RPM higher than expected"],
        ["热车以后怠速还在一千二左右下不来，等红灯时车往前拱",
         "清洗节气门后怠速一直偏高",
         "even when fully warm the idle hangs around 1200 rpm and the car creeps forward at traffic lights"],
    ),
    "P0562": (
        ["系统电压过低", "发电机充电不足", "System voltage low"],
        ["开夜车的时候大灯越来越暗，电压表显示不到十二伏，皮带有点响",
         "行车中电瓶电压一直偏低，怀疑发电机不发电",
         "driving at night the headlights dim and the voltage reads under twelve, the belt squeals a little"],
    ),
    "U0100": (
        ["与发动机控制模块通讯丢失", "ECM掉线", "Lost communication with ECM/PCM"],
        ["仪表突然转速表不动了，好多灯一起亮，读不到发动机电脑",
         "诊断仪连不上发动机控制单元，其它模块都报与它失去联系",
         "the rev counter freezes, many warning lights come on together and the engine computer cannot be reached"],
    ),
    "U0121": (
        ["与ABS模块通讯丢失", "ABS控制单元掉线", "Lost communication with ABS"],
        ["ABS灯和侧滑灯一起亮，车速表也不走了",
         "涉水后刹车防抱死系统失联，仪表一堆故障灯",
         "the anti-lock brake and stability lights come on together and the speedometer stops working"],
    ),
    "U0073": (
        ["CAN总线关闭", "控制模块通讯总线A关闭", "Control module bus A off"],
        ["整车好多控制器同时报通讯故障，一个个拔掉模块后才恢复",
         "加装了行车记录仪以后总线就瘫了，所有模块互相收不到消息",
         "lots of modules report communication faults at once, the network only recovers when one unit is unplugged"],
    ),
    "U0140": (
        ["与车身控制模块通讯丢失", "BCM通讯中断", "Lost communication with BCM"],
        ["车门锁、灯光、雨刮一起失灵，仪表报车身控制器故障",
         "下雨后车身电器全都不听使唤，车身控制器没反应",
         "door locks, lights and wipers all stop working together and the body controller does not respond"],
    ),
    "C0035": (
        ["左前轮速传感器故障", "左前轮速信号丢失", "LF wheel speed sensor circuit"],
        ["ABS灯亮，查看数据左边前面那个轮子速度一直是零",
         "司机侧前轮的轮速信号时有时无，刹车时ABS乱介入",
         "the ABS light is on and the front wheel on the driver's side shows zero speed in live data"],
    ),
    "C0040": (
        ["右前轮速传感器故障", "右前轮速信号异常", "RF wheel speed sensor circuit"],
        ["ESP灯常亮，副驾驶那侧前轮的转速读数乱跳",
         "换过右边前轮刹车片后稳定系统就报故障",
         "the stability control light stays on and the passenger-side front wheel speed reading is erratic"],
    ),
    "C0045": (
        ["左后轮速传感器故障", "左后轮速信号丢失", "LR wheel speed sensor circuit"],
        ["牵引力控制灯亮了，左侧后轮轮速有时掉到零，轮毂轴承有异响",
         "后面左边那个轮子的速度信号不稳定，防滑系统被关闭",
         "traction control warning on, the rear wheel on the driver's side drops to zero speed now and then"],
    ),
    "B1318": (
        ["蓄电池电压过低", "小电瓶亏电", "Battery voltage low"],
        ["停了一个周末车就打不着了，小电瓶没电，可能有东西一直在耗电",
         "每次放几天就亏电，装了个行车记录仪以后开始的",
         "after a weekend parked the car will not start, the small battery is flat, something drains it"],
    ),
}

# Which faults each series can have (an EV has no misfire, a petrol car no HV pack).
EV_FAMILIES = {"battery", "charging", "hv_isolation", "thermal", "motor", "network", "chassis", "body", "electrical"}
ICE_FAMILIES = {"engine", "fuel", "emission", "cooling", "network", "chassis", "body", "electrical"}
EV_NETWORK = {"U0111", "U0073", "U0121", "U0140"}
ICE_NETWORK = {"U0100", "U0073", "U0121", "U0140"}
